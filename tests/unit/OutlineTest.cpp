//===- OutlineTest.cpp - layer outlining and the Workload ----------------===//
#include "TestSupport.h"
#include "orrery/Transforms/Passes.h"
#include "orrery/Workload/BuildWorkload.h"

#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {

orrery::Workload outline(MLIRContext &ctx, const std::string &fixture,
                         int64_t batch) {
  orrery::onnx::LoadOptions options;
  options.dims["batch"] = batch;
  auto module = orrery::importOnnxFile(
      ctx, orrery::test::sourceDir() + "/models/fixtures/" + fixture, options);
  EXPECT_TRUE(bool(module)) << llvm::toString(module.takeError());
  PassManager pm(&ctx);
  pm.addPass(orrery::createOutlineLayersPass());
  EXPECT_TRUE(succeeded(pm.run(**module)));
  auto w = orrery::buildWorkload(**module);
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
