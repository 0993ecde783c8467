//===- PlanReport.cpp - the `orrery plan` summary ------------------------===//
#include "PlanReport.h"
#include "Simulate.h"
#include "UncertaintyText.h"
#include "orrery/Export/Exporters.h"
#include "orrery/Plan/Capabilities.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace orrery {

static double gib(double b) { return b / double(1ull << 30); }

static std::string row(int rank, const StepResult &r, Objective o) {
  const Strategy &s = r.strategy;
  char buf[256];
  // cp with its exchange: "4r" the ring, "4a" all-to-all.
  std::string cp = std::to_string(s.cp);
  if (s.cp > 1)
    cp += s.cpComm == CpComm::Ring ? "r" : "a";
  // ep with "f" when the experts fold tp away (etp 1).
  std::string ep = std::to_string(s.ep) + (s.expertsFolded() ? "f" : "");
  // Full recompute of the first K layers of each chunk: "full:K".
  std::string recompute = recomputeName(s.recompute);
  if (s.recomputeLayers > 0)
    recompute += ":" + std::to_string(s.recomputeLayers);
  if (!s.recomputeKinds.empty())
    recompute += "*"; // some kinds only (the strategy line names them)
  std::snprintf(
      buf, sizeof buf,
      "  %-3d %9.3f %7.1f%% %7.1f%% %8.1f  %3d %3d %4d %3s %3s %4lld %4d "
      "%-10s %4d%s%s\n",
      rank, r.stepS, 100 * r.mfu, 100 * r.bubbleFraction,
      gib(r.peakMemoryBytes), s.tp, s.pp, s.dp, cp.c_str(), ep.c_str(),
      (long long)s.microBatch, s.virtualStages, recompute.c_str(), s.zeroStage,
      s.offloadOptimizer && s.offloadActivations ? " offload+act"
      : s.offloadOptimizer                       ? " offload"
      : s.offloadActivations                     ? " offload-act"
                                                 : "",
      s.splitsWeightGradients()
          ? (std::string(" ") + scheduleName(s.schedule)).c_str()
          : "");
  std::string line = buf;
  // The objective's own figure when it is not the step time.
  if (o != Objective::Time) {
    line.pop_back();
    std::snprintf(buf, sizeof buf, "   %s %.4g\n",
                  o == Objective::Energy ? "kJ" : "USD",
                  o == Objective::Energy ? r.energyJ / 1e3 : r.costUsd);
    line += buf;
  }
  return line;
}

/// Where the best plan's groups sit and so which link each runs on: inside
/// a node, inside a scale-up domain of several (an NVL72 rack), or through
/// the network cards.
static std::string groupsLine(const Cluster &c, const Strategy &s) {
  StagePlacement at = placementOf(c, s);
  const NodeGroup &g = c.groupOf(0);
  auto where = [&](const char *name, int ranks, const GroupShape &shape) {
    if (ranks <= 1)
      return std::string();
    std::string link = g.intraNodeLink ? g.intraNodeLink->name : "the node";
    std::string out = std::string(name) + "=" + std::to_string(ranks) + " ";
    if (shape.ranksPerNode >= shape.ranks)
      return out +
             (ranks > g.devicesPerNode && g.domainNodes > 1
                  ? "inside one scale-up domain (" + link + " across its nodes)"
                  : "inside a node (" + link + ")");
    return out + std::to_string(shape.ranksPerNode) + " a " +
           (g.domainNodes > 1 ? "domain" : "node") + " on " + link +
           ", the rest through the cards (" +
           (g.nic ? g.nic->name : std::string("none")) + ")";
  };
  std::string out;
  for (const std::string &part :
       {where("tp", s.tp, at.tpGroup), where("cp", s.cp, at.cpGroup),
        where("ep", s.ep, at.epGroup),
        where(s.cp > 1 ? "dp x cp" : "dp", s.dp * s.cp, at.dpGroup)})
    if (!part.empty())
      out += (out.empty() ? "  groups: " : "; ") + part;
  return out.empty() ? "" : out + "\n";
}

void printPlan(std::ostream &os, const PlanResult &r, const Workload &w,
               Objective o, bool explain) {
  const StepResult &b = r.top.front();
  char buf[512];
  os << "model        " << w.source << "\n";
  os << "cluster      " << r.cluster.name << " (" << r.cluster.numDevices()
     << " x " << r.cluster.deviceSpec(0).name << ")\n";
  os << fabricLines(r.cluster);
  if (r.searchS > 0)
    std::snprintf(buf, sizeof buf,
                  "searched     %lld candidates priced in %.0f ms (%.0f per "
                  "second), %lld pruned by memory or bound\n\n",
                  (long long)r.candidatesPriced, r.searchS * 1e3,
                  r.candidatesPriced / std::max(r.searchS, 1e-9),
                  (long long)r.candidatesPruned);
  else
    std::snprintf(buf, sizeof buf,
                  "searched     nothing: the strategy was "
                  "given with --strategy\n\n");
  if (!r.framework.empty() && r.searchS > 0 &&
      (r.framework != "any" || r.candidatesRefused > 0)) {
    std::string s(buf);
    s.resize(s.size() - 2); // the blank line after it
    s += ", " + std::to_string(r.candidatesRefused) +
         " refused by --framework " + r.framework + "\n\n";
    os << s;
  } else {
    os << buf;
  }
  os << "best plan    " << b.strategy.str() << "\n";
  std::string tokens;
  if (b.tokensPerS > 0) {
    std::snprintf(buf, sizeof buf, "%.4g tokens/s   ", b.tokensPerS);
    tokens = buf;
  }
  std::snprintf(
      buf, sizeof buf,
      "step         %.3f s   %s%.4g samples/s   MFU %.1f%%   bubble %.1f%%\n"
      "memory       peak %.1f GiB of %.1f GiB per device, %.1f GiB held "
      "back (--memory-headroom %g)\n",
      b.stepS, tokens.c_str(), b.samplesPerS, 100 * b.mfu,
      100 * b.bubbleFraction, gib(b.peakMemoryBytes),
      gib(r.cluster.deviceSpec(0).memoryBytes),
      gib(r.cluster.deviceSpec(0).memoryBytes * b.assumptions.memoryHeadroom),
      b.assumptions.memoryHeadroom);
  os << buf << cli::uncertaintyLines(uncertaintyOf(b));
  if (b.hostMemoryBytesPerNode > 0) {
    const Strategy &s = b.strategy;
    const char *what = s.chunkParams > 0 ? "chunks (PatrickStar)"
                       : s.offloadOptimizer && s.offloadActivations
                           ? "optimizer state and activations"
                       : s.offloadOptimizer ? "optimizer state"
                                            : "activations";
    std::snprintf(buf, sizeof buf,
                  "host memory  %.1f GiB per node for the offloaded %s, of "
                  "%.1f GiB\n",
                  gib(b.hostMemoryBytesPerNode), what,
                  gib(r.cluster.sites[0].nodeGroups[0].hostMemoryBytes));
    os << buf;
  }
  std::vector<std::string> runs = frameworksRunning(b, w);
  std::string targets;
  for (const std::string &f : runs)
    targets += (targets.empty() ? "" : ", ") + f;
  os << "runs on      "
     << (targets.empty()
             ? "none of the export targets (orrery export --to mlir)"
             : targets + " (orrery export --to NAME)")
     << "\n";
  if (r.fastestUnrunnable) {
    const StepResult &u = *r.fastestUnrunnable;
    // What it needs, as the target that runs the plan says it.
    std::vector<std::string> refusals = frameworkRefusals(u, w);
    for (const std::string &why : refusals)
      if (!runs.empty() && why.rfind(runs.front() + ":", 0) == 0)
        refusals.insert(refusals.begin(), why);
    std::snprintf(buf, sizeof buf,
                  "faster       %s: %.3f s (%.1f %% faster, MFU %.1f%%), but "
                  "no export target runs it",
                  u.strategy.str().c_str(), u.stepS,
                  100 * (1 - u.stepS / b.stepS), 100 * u.mfu);
    os << buf << (refusals.empty() ? "" : "; " + refusals.front()) << "\n";
  }
  for (const std::string &d : b.precisionFallbackDevices)
    os << "precision    " << precisionName(b.strategy.precision) << " on " << d
       << ": no tensor cores for it; its GEMMs priced at the fp32 rate\n";
  if (b.costUsd > 0 || o != Objective::Time) {
    os << "energy       " << energyText(b.energy) << "\n";
    if (b.costUsd > 0) {
      std::snprintf(buf, sizeof buf, "cost         %.4g USD per step\n",
                    b.costUsd);
      os << buf;
    }
  }
  os << "\n  #    step s     MFU  bubble  mem GiB   tp  pp   dp  cp  ep  mbs  "
        "vpp "
        "recompute  zero\n";
  for (size_t i = 0; i < r.top.size(); ++i)
    os << row(int(i + 1), r.top[i], o);
  if (!explain || r.top.size() < 2)
    return;
  os << "\nwhy #1 wins\n";
  if (r.cluster.homogeneous())
    os << groupsLine(r.cluster, b.strategy);
  double cap = r.cluster.deviceSpec(0).memoryBytes;
  auto exposed = [](const StepResult &x) {
    return x.exposedTpCommS + x.exposedCpCommS + x.exposedEpCommS +
           x.exposedPpCommS + x.exposedDpCommS;
  };
  for (size_t i = 1; i < r.top.size(); ++i) {
    const StepResult &x = r.top[i];
    std::snprintf(buf, sizeof buf,
                  "  vs #%zu: %.1f%% slower; compute %.2f vs %.2f s, bubble "
                  "%.2f vs %.2f s, "
                  "exposed communication %.2f vs %.2f s, memory headroom %.1f "
                  "vs %.1f GiB\n",
                  i + 1, 100 * (x.stepS / b.stepS - 1), b.computeS, x.computeS,
                  b.bubbleS, x.bubbleS, exposed(b), exposed(x),
                  gib(cap - b.peakMemoryBytes), gib(cap - x.peakMemoryBytes));
    os << buf;
  }
}

} // namespace orrery

namespace orrery {

void printHeteroResult(std::ostream &os, const HeteroResult &b,
                       const std::vector<Pool> &pools, const Workload &w,
                       const Cluster &c, Objective o,
                       const std::string &searched) {
  char buf[512];
  os << "model        " << w.source << "\n";
  os << "cluster      " << c.name << " (" << c.numDevices() << " devices:";
  for (size_t p = 0; p < pools.size(); ++p)
    os << (p ? "," : "") << " " << pools[p].devices << " x " << pools[p].name;
  os << ")\n";
  os << fabricLines(c);
  os << searched;
  os << (searched.empty() ? "strategy     " : "best plan    ")
     << b.strategy.str(pools) << "\n";
  std::string tokens;
  if (b.tokensPerS > 0) {
    std::snprintf(buf, sizeof buf, "%.4g tokens/s   ", b.tokensPerS);
    tokens = buf;
  }
  std::snprintf(buf, sizeof buf,
                "step         %.3f s   %s%.4g samples/s   MFU %.1f%%   "
                "%d of %d devices used\n",
                b.stepS, tokens.c_str(), b.samplesPerS, 100 * b.mfu,
                b.devicesUsed, c.numDevices());
  os << buf << cli::uncertaintyLines(uncertaintyOf(b));
  std::vector<std::string> fallback;
  for (const StepResult &g : b.groups)
    for (const std::string &d : g.precisionFallbackDevices)
      if (!llvm::is_contained(fallback, d))
        fallback.push_back(d);
  for (const std::string &d : fallback)
    os << "precision    " << precisionName(b.strategy.precision) << " on " << d
       << ": no tensor cores for it; its GEMMs priced at the fp32 rate\n";
  if (b.crossGroupSyncS > 0 || b.wanBytesPerStep > 0) {
    std::snprintf(buf, sizeof buf,
                  "gradients    %.3f s across replica groups;  WAN %.4g GB "
                  "per step, %.4g USD egress\n",
                  b.crossGroupSyncS, b.wanBytesPerStep / 1e9, b.wanUsdPerStep);
    os << buf;
  }
  if (b.costUsd > 0 || o != Objective::Time) {
    os << "energy       " << energyText(b.energy) << "\n";
    if (b.costUsd > 0) {
      std::snprintf(buf, sizeof buf, "cost         %.4g USD per step\n",
                    b.costUsd);
      os << buf;
    }
  }
  os << "\n  group stage  pool                    tp  layers  replicas  "
        "micro-batches  mem GiB / cap\n";
  for (size_t g = 0; g < b.groups.size(); ++g) {
    const ReplicaGroup &rg = b.strategy.groups[g];
    int64_t lo = *std::min_element(rg.microBatches.begin(),
                                   rg.microBatches.end()),
            hi = *std::max_element(rg.microBatches.begin(),
                                   rg.microBatches.end());
    std::string mb = std::to_string(lo) +
                     (hi != lo ? "-" + std::to_string(hi) : "") + " x " +
                     std::to_string(rg.microBatch);
    for (size_t i = 0; i < rg.stages.size(); ++i) {
      const StageReport &st = b.groups[g].stages[i];
      std::snprintf(buf, sizeof buf,
                    "  %5zu %5zu  %-22s %3d  %6d  %8d  %13s  %5.1f / %.0f\n", g,
                    i, pools[rg.stages[i].pool].name.c_str(), rg.stages[i].tp,
                    rg.stages[i].layers, rg.replicas, mb.c_str(),
                    gib(st.memory.total()), gib(st.capacityBytes));
      os << buf;
    }
  }
}

void printHeteroPlan(std::ostream &os, const HeteroPlanResult &r,
                     const Workload &w, const Cluster &c, Objective o,
                     const nlohmann::json &planDoc) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "searched     %lld candidates priced in %.0f ms, %lld pruned "
                "by memory or bound\n\n",
                (long long)r.candidatesPriced, r.searchS * 1e3,
                (long long)r.candidatesPruned);
  std::ostringstream result;
  printHeteroResult(result, r.top.front(), r.pools, w, c, o, buf);
  // Of the export targets, only the PyTorch script runs such plans.
  auto script = exportHeteroPytorch(planDoc, "plan");
  std::string runs = "pytorch (orrery export --to pytorch)\n";
  if (!script) {
    std::string why = llvm::toString(script.takeError());
    std::string prefix = "plan: ";
    if (why.rfind(prefix, 0) == 0)
      why = why.substr(prefix.size());
    runs = "none of the export targets (" + why + ")\n";
  }
  // After the figures, before the stage table.
  std::string text = result.str();
  size_t table = text.find("\n  group stage");
  text.insert(table == std::string::npos ? text.size() : table,
              "runs on      " + runs);
  os << text;
  os << "\n  #    step s     MFU  devices  plan\n";
  for (size_t i = 0; i < r.top.size(); ++i) {
    std::snprintf(buf, sizeof buf, "  %-3zu %9.3f %7.1f%% %8d  ", i + 1,
                  r.top[i].stepS, 100 * r.top[i].mfu, r.top[i].devicesUsed);
    os << buf << r.top[i].strategy.str(r.pools) << "\n";
  }
}

} // namespace orrery
