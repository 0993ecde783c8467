//===- Stragglers.cpp - a plan's step with one slow device or NIC ---------===//
#include "Stragglers.h"

#include <cstdio>

namespace orrery {
namespace cli {

llvm::Expected<StragglerReport>
priceStragglers(const Workload &w, const Cluster &c, const StepResult &best) {
  StragglerReport r;
  r.stepS = best.stepS;
  Assumptions a = best.assumptions;
  a.stragglerSlowdown = r.slowdown;
  for (int stage = 0; stage < std::max(1, best.strategy.pp); ++stage) {
    a.stragglerStage = stage;
    auto slow = simulateStep(w, c, best.strategy, a);
    if (!slow)
      return slow.takeError();
    if (slow->stepS > r.slowDeviceStepS) {
      r.slowDeviceStepS = slow->stepS;
      r.slowDeviceStage = stage;
    }
  }
  if (c.numNodes() < 2)
    return r;
  // Every node's NICs at the slow pace: the rings through the slow one set
  // the pace of theirs, and the synchronous step waits for them.
  Cluster slowNics = c;
  for (Site &site : slowNics.sites)
    for (NodeGroup &ng : site.nodeGroups)
      if (ng.nic) {
        slowNics.inlineLinks.push_back(*ng.nic);
        slowNics.inlineLinks.back().bandwidthBytesPerS /= r.slowdown;
        ng.nic = &slowNics.inlineLinks.back();
      }
  auto slow = simulateStep(w, slowNics, best.strategy, best.assumptions);
  if (!slow)
    return slow.takeError();
  r.slowNicStepS = slow->stepS;
  return r;
}

void printStragglers(std::ostream &os, const StragglerReport &r) {
  char buf[320];
  auto pct = [&](double s) { return 100 * (s / r.stepS - 1); };
  int n = std::snprintf(buf, sizeof buf,
                        "stragglers   one device %.0f %% slower: step %+.1f %% "
                        "(on stage %d)",
                        100 * (r.slowdown - 1), pct(r.slowDeviceStepS),
                        r.slowDeviceStage);
  if (r.slowNicStepS > 0 && n > 0 && size_t(n) < sizeof buf)
    std::snprintf(buf + n, sizeof buf - size_t(n),
                  "; one node's NICs %.0f %% slower: %+.1f %%",
                  100 * (r.slowdown - 1), pct(r.slowNicStepS));
  os << buf << "\n";
}

nlohmann::ordered_json stragglersJson(const StragglerReport &r) {
  nlohmann::ordered_json j = {{"slowdown_factor", r.slowdown},
                              {"slow_device_step_time_s", r.slowDeviceStepS},
                              {"slow_device_stage", r.slowDeviceStage}};
  if (r.slowNicStepS > 0)
    j["slow_nic_step_time_s"] = r.slowNicStepS;
  return j;
}

} // namespace cli
} // namespace orrery
