//===- Stragglers.h - a plan's step with one slow device or NIC -*- C++ -*-===//
//
// A synchronous step waits for its slowest member. Beside a plan, `plan`
// reports its step with one device computing 10 % slower (on the stage
// where that costs most: its tensor-parallel peers wait for it at every
// collective, its stage's replicas at the gradient reduction) and with one
// node's NICs 10 % slower (every ring through them at that pace; the rest
// of the step waits for them). MegaScale found about 0.5 % of its machines
// 10 % slow; ByteDance found 42.5 % of its jobs slowed by at least 10 %
// (docs/reliability-sources.md, section 12).
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_TOOLS_STRAGGLERS_H
#define ORRERY_TOOLS_STRAGGLERS_H

#include "orrery/CostModel/Cluster.h"
#include "orrery/CostModel/Simulator.h"

#include <nlohmann/json.hpp>
#include <ostream>

namespace orrery {
namespace cli {

struct StragglerReport {
  double slowdown = 1.1;
  double stepS = 0;
  double slowDeviceStepS = 0;
  int slowDeviceStage = 0;
  /// 0 on one node: no NIC on the step's path.
  double slowNicStepS = 0;
};

/// `best`'s step again with one straggler at a time.
llvm::Expected<StragglerReport>
priceStragglers(const Workload &w, const Cluster &c, const StepResult &best);

void printStragglers(std::ostream &os, const StragglerReport &r);
nlohmann::ordered_json stragglersJson(const StragglerReport &r);

} // namespace cli
} // namespace orrery

#endif // ORRERY_TOOLS_STRAGGLERS_H
