//===- Simulate.cpp - the `orrery simulate` report -----------------------===//
#include "Simulate.h"
#include "UncertaintyText.h"
#include "orrery/CostModel/PrintableLine.h"
#include "orrery/Plan/Plan.h"

#include <cstdio>

namespace orrery {

static double gib(double bytes) { return bytes / double(1ull << 30); }

using ojson = nlohmann::ordered_json;

nlohmann::ordered_json simulateJson(const StepResult &r, const Cluster &c,
                                    const Workload &w) {
  ojson j;
  j["model"] = w.source;
  j["cluster"] = c.name;
  j["devices"] = c.numDevices();
  j["strategy"] = r.strategy.str();
  ojson metrics = metricsJson(r); // items() refers into it: keep it alive
  for (auto &[key, value] : metrics.items())
    j[key] = value;
  j["breakdown_s"] = {{"compute", r.computeS},
                      {"exposed_tp_communication", r.exposedTpCommS},
                      {"exposed_cp_communication", r.exposedCpCommS},
                      {"cp_transfers", r.cpTransferS},
                      {"exposed_ep_communication", r.exposedEpCommS},
                      {"exposed_pp_communication", r.exposedPpCommS},
                      {"exposed_dp_communication", r.exposedDpCommS},
                      {"exposed_host_transfers", r.hostTransferS},
                      {"bubble", r.bubbleS},
                      {"optimizer", r.optimizerS}};
  j["fits"] = r.fits;
  if (!r.fits)
    j["does_not_fit"] = r.doesNotFit;
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const StageReport &st : r.stages)
    stages.push_back(stageJson(st));
  j["stages"] = stages;
  ojson layers = ojson::array();
  for (const LayerBreakdown &b : r.layers) {
    ojson kernels = ojson::array();
    for (const KernelTime &k : b.kernels)
      kernels.push_back({{"kernel", k.name},
                         {"count", k.count},
                         {"forward_s", k.forwardS},
                         {"backward_s", k.backwardS}});
    layers.push_back({{"kind", b.kind},
                      {"count", b.count},
                      {"forward_s_per_micro_batch", b.forwardS},
                      {"backward_s_per_micro_batch", b.backwardS},
                      {"activation_bytes_per_micro_batch", b.keptBytes},
                      {"kernels", kernels}});
  }
  j["layers"] = layers;
  return j;
}

std::string energyText(const EnergyByActivity &e) {
  if (!e.known())
    return "unknown: " + e.unknownFor +
           " has no published board power (a cluster file's power_w gives "
           "it)";
  double total = e.total();
  auto pct = [&](double j) { return total > 0 ? 100 * j / total : 0.0; };
  char buf[192];
  std::snprintf(buf, sizeof buf,
                "%.4g J per step (tensor math %.0f %%, memory-bound %.0f %%, "
                "communication %.0f %%, waiting %.0f %%)",
                total, pct(e.gemmJ), pct(e.memoryBoundJ), pct(e.communicationJ),
                pct(e.idleJ));
  return buf;
}

std::string fabricLines(const Cluster &c) {
  std::string out;
  for (const Site &site : c.sites)
    for (const NodeGroup &g : site.nodeGroups)
      if (g.domainNodes > 1)
        out += "scale-up     " + g.intraNodeLink->name + " domains of " +
               std::to_string(g.scaleUpDevices()) + " " + g.device->name +
               " (" + std::to_string(g.domainNodes) + " nodes of " +
               std::to_string(g.devicesPerNode) +
               "): tp, ep and cp groups inside one priced on it\n";
  for (const Site &site : c.sites) {
    const std::vector<FabricTier> &tiers = site.nodeGroups.front().tiers;
    if (tiers.empty())
      continue;
    out += "fabric       ";
    if (c.sites.size() > 1)
      out += site.name + ": ";
    for (size_t i = 0; i < tiers.size(); ++i)
      out += (i ? ", " : "") + tiers[i].name + " " +
             std::to_string(tiers[i].nodes) + " nodes " +
             printableNumber(tiers[i].oversubscription) + ":1";
    if (!site.fabricSource.empty())
      out += " (" + site.fabricSource + ")";
    out += "\n";
  }
  return out;
}

void printSimulation(std::ostream &os, const StepResult &r, const Cluster &c,
                     const Workload &w) {
  char buf[512];
  os << "model        " << w.source << "\n";
  os << "cluster      " << c.name << " (" << c.numDevices() << " x "
     << c.deviceSpec(0).name << ")\n";
  os << fabricLines(c);
  os << "strategy     " << r.strategy.str() << "\n";
  if (!r.measuredKernelDevices.empty())
    os << "kernels      " << kernelRates(r.measuredKernelDevices)
       << " (docs/costmodel.md)\n";
  for (const std::string &d : r.precisionFallbackDevices)
    os << "precision    " << precisionName(r.strategy.precision) << " on " << d
       << ": no tensor cores for it; its GEMMs priced at the fp32 rate\n";
  if (!r.assumptions.fusedGradientAccumulation)
    os << "gradients    accumulated into fp32 main gradients by a kernel of "
          "their own each micro-batch\n";
  os << "\n";
  std::string tokens;
  if (r.tokensPerS > 0) {
    std::snprintf(buf, sizeof buf, "%.4g tokens/s   ", r.tokensPerS);
    tokens = buf;
  }
  std::snprintf(buf, sizeof buf,
                "step         %.3f s   %s%.4g samples/s\n"
                "throughput   %.1f TFLOP/s per device (model FLOPs)   MFU "
                "%.1f%%   HFU %.1f%%\n"
                "bubble       %.1f%% of the step\n\n",
                r.stepS, tokens.c_str(), r.samplesPerS, r.modelTflopsPerDevice,
                100 * r.mfu, 100 * r.hfu, 100 * r.bubbleFraction);
  os << buf;
  if (std::string band = cli::uncertaintyLines(uncertaintyOf(r)); !band.empty())
    os << band << "\n";
  os << "time on the slowest stage\n";
  auto line = [&](const char *what, double s) {
    std::snprintf(buf, sizeof buf, "  %-28s %9.3f s  %5.1f%%\n", what, s,
                  100 * s / r.stepS);
    os << buf;
  };
  line("compute (incl. recompute)", r.computeS);
  line("tensor-parallel collectives", r.exposedTpCommS);
  if (r.strategy.cp > 1) {
    line(r.strategy.cpComm == CpComm::Ring ? "context-parallel ring"
                                           : "context-parallel all-to-all",
         r.exposedCpCommS);
    std::snprintf(buf, sizeof buf,
                  "    (%.3f s of key-value transfers, %.3f s hidden behind "
                  "the attention)\n",
                  r.cpTransferS,
                  std::max(0.0, r.cpTransferS - r.exposedCpCommS));
    os << buf;
  }
  if (r.strategy.ep > 1 || r.exposedEpCommS > 0)
    line("expert all-to-all", r.exposedEpCommS);
  line("pipeline transfers", r.exposedPpCommS);
  line("gradient reduction", r.exposedDpCommS);
  if (r.hostTransferS > 0)
    line("chunks to and from the host", r.hostTransferS);
  line("pipeline bubble", r.bubbleS);
  line("optimizer step", r.optimizerS);
  if (!r.layers.empty()) {
    os << "\nlayers, per micro-batch on a device of stage 0 (kernels: "
       << kernelFusionName(r.assumptions.fusion) << ")\n";
    for (const LayerBreakdown &b : r.layers) {
      std::snprintf(buf, sizeof buf,
                    "  %-20s x%-5lld forward %8.3f ms  backward %8.3f ms  "
                    "activations kept %9.2f MiB\n",
                    b.kind.c_str(), (long long)b.count, 1e3 * b.forwardS,
                    1e3 * b.backwardS, b.keptBytes / double(1 << 20));
      os << buf;
      if (b.count < 2)
        continue;
      for (const KernelTime &k : b.kernels) {
        if (k.forwardS + k.backwardS <= 0)
          continue;
        std::snprintf(buf, sizeof buf, "    %-24s x%-3d %8.3f ms %8.3f ms\n",
                      k.name.c_str(), k.count, 1e3 * k.forwardS,
                      1e3 * k.backwardS);
        os << buf;
      }
    }
  }
  os << "\nmemory per device (GiB)\n";
  std::snprintf(buf, sizeof buf, "  %-6s %-7s %8s %8s %9s %11s %9s %8s %9s\n",
                "stage", "layers", "weights", "grads", "optimizer",
                "activations", "workspace", "total", "capacity");
  os << buf;
  for (size_t i = 0; i < r.stages.size(); ++i) {
    const StageReport &st = r.stages[i];
    if (r.stages.size() > 8 && i >= 4 && i + 4 < r.stages.size()) {
      if (i == 4)
        os << "  ...\n";
      continue;
    }
    std::snprintf(buf, sizeof buf,
                  "  %-6zu %-7d %8.1f %8.1f %9.1f %11.1f %9.1f %8.1f %9.1f\n",
                  i, st.numLayers, gib(st.memory.weightsBytes),
                  gib(st.memory.gradientsBytes), gib(st.memory.optimizerBytes),
                  gib(st.memory.activationsBytes),
                  gib(st.memory.workspaceBytes), gib(st.memory.total()),
                  gib(st.capacityBytes));
    os << buf;
  }
  if (r.assumptions.memoryHeadroom > 0 && !r.stages.empty()) {
    std::snprintf(buf, sizeof buf,
                  "  (workspace: the CUDA context and libraries' workspaces, "
                  "and NCCL's buffers per communicator; %.1f GiB of each "
                  "device held back: --memory-headroom %g)\n",
                  gib(r.stages[0].capacityBytes * r.assumptions.memoryHeadroom),
                  r.assumptions.memoryHeadroom);
    os << buf;
  }
  if (!r.fits)
    os << "\nDOES NOT FIT: " << r.doesNotFit << "\n";
  os << "\nenergy       " << energyText(r.energy);
  if (r.costUsd > 0) {
    std::snprintf(buf, sizeof buf, "   cost %.4g USD per step", r.costUsd);
    os << buf;
  }
  os << "\n";
}

} // namespace orrery
