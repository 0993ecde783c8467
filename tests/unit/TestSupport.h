//===- TestSupport.h - helpers shared by the unit tests -------------------===//
#ifndef ORRERY_TESTS_UNIT_TESTSUPPORT_H
#define ORRERY_TESTS_UNIT_TESTSUPPORT_H

#include "orrery/CostModel/Cluster.h"
#include "orrery/CostModel/ServingStep.h"
#include "orrery/CostModel/Workload.h"
#include "orrery/Import/Importer.h"
#include "orrery/Transforms/Passes.h"
#include "orrery/Workload/BuildWorkload.h"

#include "mlir/Pass/PassManager.h"
#include <gtest/gtest.h>

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <string>

namespace orrery::test {

/// The source tree, for fixtures (set by CMake).
inline std::string sourceDir() { return ORRERY_SOURCE_DIR; }

/// Parses MLIR text with the orrery dialects loaded.
inline mlir::OwningOpRef<mlir::ModuleOp> parse(mlir::MLIRContext &ctx,
                                               const std::string &text) {
  registerOrreryDialects(ctx);
  return mlir::parseSourceString<mlir::ModuleOp>(text, &ctx);
}

inline Cluster preset(const char *text) {
  auto c = parseClusterPreset(text, HardwareCatalog::builtin());
  EXPECT_TRUE(bool(c));
  return std::move(*c);
}

/// tiny-gpt at `batch`, prepared for `kernels` as the CLI's front end does.
inline Workload tinyGpt(mlir::MLIRContext &ctx, KernelFusion kernels, int64_t batch = 1,
                        const FineTuning &fineTuning = {}) {
  onnx::LoadOptions options;
  options.dims["batch"] = batch;
  auto module = importOnnxFile(
      ctx, test::sourceDir() + "/models/fixtures/tiny-gpt.onnx", options);
  EXPECT_TRUE(bool(module));
  mlir::PassManager pm(&ctx);
  if (kernels != KernelFusion::Eager) {
    FuseKernelsPassOptions fusion;
    fusion.attention = kernels == KernelFusion::Fused;
    pm.addPass(createFuseKernelsPass(fusion));
  }
  pm.addPass(createOutlineLayersPass());
  EXPECT_TRUE(mlir::succeeded(pm.run(**module)));
  auto w = buildWorkload(**module, {}, kernels, fineTuning);
  EXPECT_TRUE(bool(w));
  return *w;
}

/// `layers` mixture-of-experts layers: a router-free stand-in with one
/// batched expert GEMM over 8 experts (all the layer's parameters), and the
/// tokens it dispatches.
/// A built-in model (models/generate.py, written at build time) at batch
/// 1, fused and outlined as `orrery` prepares it.
inline Workload builtinWorkload(mlir::MLIRContext &ctx,
                                const std::string &name) {
  onnx::LoadOptions options;
  options.dims["batch"] = 1;
  auto module = importOnnxFile(
      ctx, std::string(ORRERY_MODELS_DIR) + "/" + name + ".onnx", options);
  EXPECT_TRUE(bool(module))
      << (module ? "" : llvm::toString(module.takeError()));
  mlir::PassManager pm(&ctx);
  pm.addPass(createFuseKernelsPass(FuseKernelsPassOptions{}));
  pm.addPass(createOutlineLayersPass());
  EXPECT_TRUE(mlir::succeeded(pm.run(**module)));
  auto w = buildWorkload(**module, {}, KernelFusion::Fused);
  EXPECT_TRUE(bool(w));
  return std::move(*w);
}

inline Workload moeModel(int layers, int64_t expertParams, int64_t dispatchBytes) {
  Workload w;
  LayerKind k;
  k.name = "moe_layer";
  k.count = layers;
  k.parameters = expertParams;
  k.experts = 8;
  k.expertParameters = expertParams;
  k.expertReplicatedParameters = expertParams; // tp = 1 here
  k.replicatedParameters = expertParams;
  k.expertDispatchBytes = dispatchBytes;
  k.linearParameters = k.linearReplicatedParameters = expertParams;
  OpCost op;
  op.name = "orrery.matmul";
  op.forwardFlops = int64_t(2e12);
  op.backwardFlops = int64_t(4e12);
  op.contraction = op.weighted = true;
  op.experts = 8;
  k.ops = {op};
  k.forwardFlops = op.forwardFlops;
  k.backwardFlops = op.backwardFlops;
  k.inputBytes = k.outputBytes = dispatchBytes / 2;
  w.kinds = {k};
  w.layers = {{0, layers}};
  w.tokensPerSample = 4096;
  return w;
}

/// A built-in model on the first node group of a cluster preset, and its
/// serving step pricers.
struct Served {
  mlir::MLIRContext ctx;
  Workload w;
  Cluster cluster;
  Served(const char *model, const char *preset)
      : w(builtinWorkload(ctx, model)), cluster(test::preset(preset)) {}
  StepPricer pricer(int tp, const char *precision = "bf16",
                    ServingEngine e = ServingEngine::Vllm, int ep = 1,
                    int pp = 1) {
    auto replica = servingReplicaOn(cluster.sites[0].nodeGroups[0], tp, pp, ep);
    EXPECT_TRUE(bool(replica));
    auto prec = ServingPrecision::parse(precision, "auto");
    EXPECT_TRUE(bool(prec));
    auto p = StepPricer::create(w, *replica, *prec, e);
    EXPECT_TRUE(bool(p)) << (p ? "" : llvm::toString(p.takeError()));
    return std::move(*p);
  }
};

} // namespace orrery::test

#endif
