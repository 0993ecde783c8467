//===- FrontEndBench.cpp - how long the front end takes on a model --------===//
//
//   orrery-bench-frontend MODEL.onnx [--dim NAME=VALUE]... [--repeat N]
//
// Times each stage on its own, N times, and prints the median and the
// fastest: protobuf load + ONNX/own shape inference + folding (the ONNX
// island), import into the orrery dialect, and layer outlining. Also prints
// the op count before outlining and the layers found.
//
//===----------------------------------------------------------------------===//

#include "orrery/Import/Importer.h"
#include "orrery/Transforms/Passes.h"
#include "orrery/Workload/BuildWorkload.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

using Clock = std::chrono::steady_clock;

static double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int main(int argc, char **argv) {
  if (argc < 2) {
    llvm::errs() << "usage: orrery-bench-frontend MODEL.onnx [--dim "
                    "NAME=VALUE]... [--repeat N]\n";
    return 2;
  }
  std::string path = argv[1];
  orrery::onnx::LoadOptions options;
  int repeat = 5;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--dim") && i + 1 < argc) {
      std::string spec = argv[++i];
      size_t eq = spec.find('=');
      if (eq == std::string::npos) {
        llvm::errs() << "orrery-bench-frontend: error: --dim '" << spec
                     << "': expected NAME=VALUE\n";
        return 2;
      }
      options.dims[spec.substr(0, eq)] = std::stoll(spec.substr(eq + 1));
    } else if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    }
  }
  std::vector<double> load, import, outline, total;
  int64_t ops = 0;
  std::string layers;
  for (int r = 0; r < repeat; ++r) {
    mlir::MLIRContext ctx;
    ctx.disableMultithreading();
    orrery::registerOrreryDialects(ctx);
    auto t0 = Clock::now();
    orrery::onnx::LoadResult loaded =
        orrery::onnx::loadOnnxModel(path, options);
    if (!loaded.model) {
      llvm::errs() << "orrery-bench-frontend: error: " << loaded.error << "\n";
      return 1;
    }
    auto t1 = Clock::now();
    auto module = orrery::importModel(ctx, *loaded.model);
    if (!module) {
      llvm::errs() << "orrery-bench-frontend: error: "
                   << llvm::toString(module.takeError()) << "\n";
      return 1;
    }
    auto t2 = Clock::now();
    ops = 0;
    for (auto &[name, count] : orrery::opHistogram(**module))
      ops += count;
    auto t3 = Clock::now();
    mlir::PassManager pm(&ctx);
    pm.addPass(orrery::createOutlineLayersPass());
    if (mlir::failed(pm.run(**module))) {
      llvm::errs() << "orrery-bench-frontend: error: outlining failed\n";
      return 1;
    }
    auto w = orrery::buildWorkload(**module);
    auto t4 = Clock::now();
    if (!w) {
      llvm::errs() << "orrery-bench-frontend: error: "
                   << llvm::toString(w.takeError()) << "\n";
      return 1;
    }
    layers.clear();
    for (const orrery::LayerRun &run : w->layers)
      layers += (layers.empty() ? "" : ", ") + w->kinds[run.kind].name + " x" +
                std::to_string(run.count);
    load.push_back(seconds(t0, t1));
    import.push_back(seconds(t1, t2));
    outline.push_back(seconds(t3, t4));
    total.push_back(seconds(t0, t2) + seconds(t3, t4));
  }
  auto report = [&](const char *what, std::vector<double> v) {
    std::sort(v.begin(), v.end());
    llvm::outs() << llvm::format("  %-44s median %8.1f ms   best %8.1f ms\n",
                                 what, v[v.size() / 2] * 1e3, v.front() * 1e3);
  };
  llvm::outs() << "front end on " << path << " (" << repeat << " runs)\n";
  llvm::outs() << "  ops imported: " << ops << "\n  layers: " << layers << "\n";
  report("load + shape inference + folding", load);
  report("import into the orrery dialect", import);
  report("outline layers + build workload", outline);
  report("total", total);
  return 0;
}
