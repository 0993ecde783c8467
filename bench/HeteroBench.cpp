//===- HeteroBench.cpp - mixed clusters: the planner against baselines ---===//
//
//   orrery-bench-hetero MODEL.onnx CLUSTER [--global-batch N] [--repeat N]
//
// For a mixed (or multi-site) cluster, prints three predictions side by
// side: the best plan on the fastest device type alone, the best plan that
// treats every device alike (one configuration everywhere, even layers,
// equal shares), and the planner's; then the planner's search time (median
// of --repeat runs, one core) and the WAN traffic of its plan.
//
//===----------------------------------------------------------------------===//

#include "orrery/Import/Importer.h"
#include "orrery/Search/HeteroPlanner.h"
#include "orrery/Transforms/Passes.h"
#include "orrery/Workload/BuildWorkload.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstring>

using namespace orrery;

static void show(const char *label, llvm::Expected<HeteroPlanResult> &r,
                 double reference) {
  if (!r) {
    llvm::outs() << llvm::format("  %-22s cannot plan: ", label)
                 << llvm::toString(r.takeError()) << "\n";
    return;
  }
  const HeteroResult &b = r->top.front();
  llvm::outs() << llvm::format("  %-22s %9.3f s  %6.2fx  %4d devices  ",
                               label, b.stepS,
                               reference > 0 ? b.stepS / reference : 1.0,
                               b.devicesUsed)
               << b.strategy.str(r->pools) << "\n";
}

int main(int argc, char **argv) {
  if (argc < 3) {
    llvm::errs() << "usage: orrery-bench-hetero MODEL.onnx CLUSTER "
                    "[--global-batch N] [--repeat N]\n";
    return 2;
  }
  PlanOptions o;
  o.globalBatch = 1024;
  o.topK = 1;
  int repeat = 3;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--global-batch"))
      o.globalBatch = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeat"))
      repeat = std::max(1, std::atoi(argv[i + 1]));
  }
  mlir::MLIRContext ctx;
  ctx.disableMultithreading();
  onnx::LoadOptions options;
  options.dims["batch"] = 1;
  auto module = importOnnxFile(ctx, argv[1], options);
  if (!module) {
    llvm::errs() << "orrery-bench-hetero: error: "
                 << llvm::toString(module.takeError()) << "\n";
    return 1;
  }
  mlir::PassManager pm(&ctx);
  pm.addPass(createOutlineLayersPass());
  if (mlir::failed(pm.run(**module)))
    return 1;
  auto w = buildWorkload(**module);
  auto c = loadCluster(argv[2], HardwareCatalog::builtin());
  if (!w || !c) {
    llvm::errs() << "orrery-bench-hetero: error: bad model or cluster\n";
    llvm::consumeError(w.takeError());
    llvm::consumeError(c.takeError());
    return 1;
  }
  std::vector<Pool> pools = clusterPools(*c);
  // The fastest type: the highest tensor peak at the plan's precision.
  double fastest = 0;
  for (const Pool &p : pools)
    fastest = std::max(fastest, p.nodes->device->tensorPeak(o.precision));
  HeteroSearchScope fastOnly, uniform;
  for (const Pool &p : pools)
    fastOnly.pools.push_back(p.nodes->device->tensorPeak(o.precision) ==
                             fastest);
  uniform.uniform = true;

  std::vector<double> times;
  llvm::Expected<HeteroPlanResult> planned = llvm::createStringError(
      llvm::inconvertibleErrorCode(), "not run");
  for (int i = 0; i < repeat; ++i) {
    llvm::consumeError(planned.takeError());
    auto t0 = std::chrono::steady_clock::now();
    planned = searchHeteroPlans(*w, *c, o);
    times.push_back(std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - t0)
                        .count());
  }
  std::sort(times.begin(), times.end());
  auto fast = searchHeteroPlans(*w, *c, o, fastOnly);
  auto even = searchHeteroPlans(*w, *c, o, uniform);

  llvm::outs() << argv[1] << " on " << c->name << " (" << c->numDevices()
               << " devices), global batch " << o.globalBatch << "\n";
  double ref = planned ? planned->top.front().stepS : 0;
  show("fastest type only", fast, ref);
  // The same devices under the homogeneous planner (interleaving, context
  // parallelism, ZeRO-3 and offload included), when they form one pool.
  int fastPools = 0, fastPool = 0;
  for (size_t p = 0; p < pools.size(); ++p)
    if (fastOnly.pools[p]) {
      ++fastPools;
      fastPool = int(p);
    }
  if (fastPools == 1) {
    Cluster sub = *c;
    Site site = c->sites[pools[fastPool].site];
    site.nodeGroups = {*pools[fastPool].nodes};
    sub.sites = {site};
    sub.siteLinks.clear();
    sub.finalize();
    PlanOptions ho = o;
    auto homo = searchPlans(*w, sub, ho);
    if (homo)
      llvm::outs() << llvm::format(
                          "  %-22s %9.3f s  %6.2fx  %4d devices  ",
                          "  (homogeneous planner)", homo->top.front().stepS,
                          ref > 0 ? homo->top.front().stepS / ref : 1.0,
                          sub.numDevices())
                   << homo->top.front().strategy.str() << "\n";
    else
      llvm::outs() << "    (homogeneous planner) cannot plan: "
                   << llvm::toString(homo.takeError()) << "\n";
  }
  show("all devices evenly", even, ref);
  show("planner", planned, ref);
  if (planned) {
    const HeteroResult &b = planned->top.front();
    llvm::outs() << llvm::format(
        "  planning time: median %.0f ms (%d runs, one core), %lld "
        "candidates priced, %lld pruned\n",
        times[times.size() / 2] * 1e3, repeat,
        (long long)planned->candidatesPriced,
        (long long)planned->candidatesPruned);
    if (b.wanBytesPerStep > 0)
      llvm::outs() << llvm::format(
          "  WAN: %.2f GB per step, %.3f USD egress per step\n",
          b.wanBytesPerStep / 1e9, b.wanUsdPerStep);
  }
  return 0;
}
