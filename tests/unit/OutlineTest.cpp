//===- OutlineTest.cpp - layer outlining and the Workload ----------------===//
#include "TestSupport.h"
#include "orrery/Transforms/Passes.h"
#include "orrery/Workload/BuildWorkload.h"
#include "orrery/Workload/Parallelism.h"

#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {

/// A fixture imported at `batch` and outlined; null on failure.
OwningOpRef<ModuleOp> outlined(MLIRContext &ctx, const std::string &fixture,
                               int64_t batch = 1) {
  orrery::onnx::LoadOptions options;
  options.dims["batch"] = batch;
  auto module = orrery::importOnnxFile(
      ctx, orrery::test::sourceDir() + "/models/fixtures/" + fixture, options);
  if (!module) {
    ADD_FAILURE() << llvm::toString(module.takeError());
    return nullptr;
  }
  PassManager pm(&ctx);
  pm.addPass(orrery::createOutlineLayersPass());
  if (failed(pm.run(**module)))
    return nullptr;
  return std::move(*module);
}

orrery::Workload outline(MLIRContext &ctx, const std::string &fixture,
                         int64_t batch) {
  OwningOpRef<ModuleOp> module = outlined(ctx, fixture, batch);
  EXPECT_TRUE(module);
  auto w = orrery::buildWorkload(*module);
  EXPECT_TRUE(bool(w));
  return *w;
}

TEST(Outline, TinyGptIsEmbeddingLayersHead) {
  MLIRContext ctx;
  orrery::Workload w = outline(ctx, "tiny-gpt.onnx", 2);
  ASSERT_EQ(w.layers.size(), 3u);
  EXPECT_EQ(w.kinds[w.layers[0].kind].name, "embedding");
  EXPECT_EQ(w.kinds[w.layers[1].kind].name, "transformer_layer");
  EXPECT_EQ(w.layers[1].count, 2);
  EXPECT_EQ(w.kinds[w.layers[2].kind].name, "head");
  // 12·L·d² + 13·L·d + (V + n_ctx)·d + 2·d with L=2, d=64, V=128, n_ctx=32;
  // the tied head adds no parameters.
  EXPECT_EQ(w.parameters(),
            12 * 2 * 64 * 64 + 13 * 2 * 64 + (128 + 32) * 64 + 2 * 64);
  EXPECT_EQ(w.batchSize, 2);
  EXPECT_EQ(w.tokensPerSample, 32);
}

TEST(Outline, LayerCostIsBatchLinear) {
  MLIRContext ctx1, ctx2;
  orrery::Workload one = outline(ctx1, "tiny-gpt.onnx", 1);
  orrery::Workload four = outline(ctx2, "tiny-gpt.onnx", 4);
  EXPECT_EQ(four.forwardFlops(), 4 * one.forwardFlops());
  EXPECT_EQ(four.parameters(), one.parameters());
}

TEST(Parallelism, DynamicProgrammingFindsMegatronsLayoutOnGpt) {
  // The cost-driven layout, from no rule about transformers, splits GPT-3
  // 125M's layer the way Megatron-LM does: QKV and FC1 column-parallel, the
  // output projection and FC2 row-parallel, the attention between them split.
  MLIRContext ctx;
  OwningOpRef<ModuleOp> module = outlined(ctx, "gpt3-125m.onnx");
  ASSERT_TRUE(module);
  auto layer = module->lookupSymbol<func::FuncOp>("transformer_layer");
  ASSERT_TRUE(layer);
  orrery::TensorParallelLayout rule = orrery::layoutTensorParallel(layer);
  orrery::TensorParallelLayout dp =
      orrery::layoutByDynamicProgramming(layer, {});
  ASSERT_EQ(rule.columnParallel.size(), 4u);
  EXPECT_EQ(dp.columnParallel.size(), rule.columnParallel.size());
  for (auto [op, column] : rule.columnParallel) {
    auto it = dp.columnParallel.find(op);
    ASSERT_NE(it, dp.columnParallel.end())
        << "not split: " << op->getName().getStringRef().str();
    EXPECT_EQ(it->second, column);
  }
  EXPECT_EQ(dp.sharded.size(), rule.sharded.size());
  for (Value v : rule.sharded)
    EXPECT_TRUE(dp.sharded.contains(v));
}

TEST(Parallelism, DynamicProgrammingKeepsTinyLayersWhole) {
  // In a 64-wide layer the all-reduces cost more than the compute they save.
  MLIRContext ctx;
  OwningOpRef<ModuleOp> module = outlined(ctx, "tiny-gpt.onnx");
  ASSERT_TRUE(module);
  auto layer = module->lookupSymbol<func::FuncOp>("transformer_layer");
  orrery::TensorParallelLayout dp =
      orrery::layoutByDynamicProgramming(layer, {});
  EXPECT_TRUE(dp.columnParallel.empty());
  EXPECT_TRUE(dp.sharded.empty());
}

TEST(Outline, ResNetFindsItsStages) {
  MLIRContext ctx;
  orrery::Workload w = outline(ctx, "resnet50.onnx", 1);
  // Bottlenecks after the first of each stage repeat: 2, 3, 5, 2.
  std::vector<int64_t> repeats;
  for (const orrery::LayerRun &run : w.layers)
    if (run.count > 1)
      repeats.push_back(run.count);
  EXPECT_EQ(repeats, (std::vector<int64_t>{2, 3, 5, 2}));
  EXPECT_EQ(w.parameters(), 25557032);
}

} // namespace
