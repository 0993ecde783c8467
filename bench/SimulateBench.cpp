//===- SimulateBench.cpp - how long one step simulation takes -------------===//
//
//   orrery-bench-simulate MODEL.onnx CLUSTER STRATEGY [--repeat N]
//
// Builds the model's workload once, then times simulateStep (median and
// best of N) and prints the predicted step. The default use (scripts/
// bench.sh) is Llama-3 405B on 16,384 H100.
//
//===----------------------------------------------------------------------===//

#include "orrery/CostModel/Simulator.h"
#include "orrery/Import/Importer.h"
#include "orrery/Transforms/Passes.h"
#include "orrery/Workload/BuildWorkload.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstring>

int main(int argc, char **argv) {
  if (argc < 4) {
    llvm::errs() << "usage: orrery-bench-simulate MODEL.onnx CLUSTER STRATEGY "
                    "[--repeat N]\n";
    return 2;
  }
  int repeat = 20;
  if (argc >= 6 && !std::strcmp(argv[4], "--repeat"))
    repeat = std::max(1, std::atoi(argv[5]));
  mlir::MLIRContext ctx;
  ctx.disableMultithreading();
  orrery::onnx::LoadOptions options;
  options.dims["batch"] = 1;
  auto module = orrery::importOnnxFile(ctx, argv[1], options);
  if (!module) {
    llvm::errs() << "orrery-bench-simulate: error: "
                 << llvm::toString(module.takeError()) << "\n";
    return 1;
  }
  mlir::PassManager pm(&ctx);
  pm.addPass(orrery::createOutlineLayersPass());
  if (mlir::failed(pm.run(**module)))
    return 1;
  auto w = orrery::buildWorkload(**module);
  auto c = orrery::loadCluster(argv[2], orrery::HardwareCatalog::builtin());
  auto s = orrery::parseStrategy(argv[3]);
  if (!w || !c || !s) {
    llvm::errs()
        << "orrery-bench-simulate: error: bad model, cluster or strategy\n";
    llvm::consumeError(w.takeError());
    llvm::consumeError(c.takeError());
    llvm::consumeError(s.takeError());
    return 1;
  }
  std::vector<double> times;
  orrery::StepResult last;
  for (int i = 0; i < repeat; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = orrery::simulateStep(*w, *c, *s);
    auto t1 = std::chrono::steady_clock::now();
    if (!r) {
      llvm::errs() << "orrery-bench-simulate: error: "
                   << llvm::toString(r.takeError()) << "\n";
      return 1;
    }
    last = *r;
    times.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  std::sort(times.begin(), times.end());
  llvm::outs() << "simulate " << argv[1] << " on " << argv[2] << " ("
               << c->numDevices() << " devices), " << last.strategy.str()
               << "\n";
  llvm::outs() << llvm::format(
      "  simulation time: median %.2f ms, best %.2f ms (%d runs, one core)\n",
      times[times.size() / 2] * 1e3, times.front() * 1e3, repeat);
  llvm::outs() << llvm::format(
      "  predicted step %.2f s, %.0f tokens/s, MFU %.1f%%, bubble %.1f%%, peak "
      "memory %.1f GiB%s\n",
      last.stepS, last.tokensPerS, 100 * last.mfu, 100 * last.bubbleFraction,
      last.peakMemoryBytes / double(1ull << 30),
      last.fits ? "" : " (does not fit)");
  return 0;
}
