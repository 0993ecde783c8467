//===- OutlineTest.cpp - layer outlining and the Workload ----------------===//
#include "TestSupport.h"
#include "orrery/Transforms/Passes.h"
#include "orrery/Workload/BuildWorkload.h"
#include "orrery/Workload/Parallelism.h"
#include "orrery/CostModel/Simulator.h"

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
  // It uses the embedding's [V, d] table, which the embedding counts.
  const orrery::LayerKind &head = w.kinds[w.layers[2].kind];
  EXPECT_EQ(head.tiedParameters, 128 * 64);
  EXPECT_EQ(head.tiedWithKind, int(w.layers[0].kind));
  EXPECT_EQ(w.kinds[w.layers[0].kind].tiedParameters, 0);
  EXPECT_EQ(w.kinds[w.layers[1].kind].tiedParameters, 0);
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

namespace {

/// The first op of `T` in a function, or null.
template <typename T> Operation *firstOp(func::FuncOp f) {
  Operation *found = nullptr;
  f.walk([&](T op) {
    if (!found)
      found = op;
  });
  return found;
}

/// The layer function that holds the network's first op of `T`.
template <typename T> func::FuncOp layerWith(ModuleOp m) {
  func::FuncOp found;
  m.walk([&](func::FuncOp f) {
    if (!found && f.getSymName() != "main" && firstOp<T>(f))
      found = f;
  });
  return found;
}

TEST(Parallelism, OpsStateHowTheyMaySplit) {
  using namespace orrery;
  MLIRContext ctx;
  OwningOpRef<ModuleOp> module = outlined(ctx, "resnet50.onnx", 8);
  ASSERT_TRUE(module);
  func::FuncOp stem = layerWith<ConvOp>(*module);
  ASSERT_TRUE(stem);
  auto conv = cast<CostOpInterface>(firstOp<ConvOp>(stem));
  EXPECT_EQ(conv.getSplitOptions(),
            unsigned(SplitBatch | SplitColumn | SplitRow | SplitSpatial));
  // A 7x7 kernel on [8, 3, 224, 224] f32: neighbours exchange 6 rows.
  EXPECT_EQ(conv.getHaloBytes(), int64_t(8) * 3 * 224 * 4 * 6);
  auto pool = cast<CostOpInterface>(firstOp<MaxPoolOp>(stem));
  EXPECT_EQ(pool.getSplitOptions(),
            unsigned(SplitFollow | SplitBatch | SplitSpatial));
  EXPECT_EQ(pool.getHaloBytes(), int64_t(8) * 64 * 112 * 4 * 2);
  func::FuncOp head = layerWith<GemmOp>(*module);
  ASSERT_TRUE(head);
  EXPECT_EQ(cast<CostOpInterface>(firstOp<GemmOp>(head)).getSplitOptions(),
            unsigned(SplitBatch | SplitColumn | SplitRow));
  EXPECT_EQ(cast<CostOpInterface>(firstOp<GlobalAveragePoolOp>(head))
                .getSplitOptions(),
            unsigned(SplitFollow | SplitBatch));
  EXPECT_EQ(cast<CostOpInterface>(firstOp<FlattenOp>(head)).getSplitOptions(),
            unsigned(SplitFollow | SplitBatch));
  // GPT: the embedding lookup splits its table by vocabulary; the product
  // of two activations (attention scores) follows the heads.
  OwningOpRef<ModuleOp> gpt = outlined(ctx, "gpt3-125m.onnx");
  ASSERT_TRUE(gpt);
  func::FuncOp embedding = layerWith<GatherOp>(*gpt);
  EXPECT_EQ(
      cast<CostOpInterface>(firstOp<GatherOp>(embedding)).getSplitOptions(),
      unsigned(SplitBatch | SplitVocab));
  auto layer = gpt->lookupSymbol<func::FuncOp>("transformer_layer");
  unsigned scores = 0;
  layer.walk([&](MatMulOp op) {
    if (llvm::all_of(op->getOperands(),
                     [](Value v) { return isActivation(v); }))
      scores = cast<CostOpInterface>(op.getOperation()).getSplitOptions();
  });
  EXPECT_EQ(scores, unsigned(SplitFollow | SplitBatch));
}

TEST(Parallelism, ConvolutionsSplitTheBatchOrSpatiallyWhereTheyMay) {
  // ResNet's stem at batch 32: big activations, a small weight. Splitting
  // the batch across the group beats any channel split (no activation
  // collective, only the small weight's gradient); when the micro-batch
  // cannot split (batch split off), the image splits spatially with a halo.
  MLIRContext ctx;
  OwningOpRef<ModuleOp> module = outlined(ctx, "resnet50.onnx", 32);
  ASSERT_TRUE(module);
  func::FuncOp stem = layerWith<orrery::ConvOp>(*module);
  Value stemOut = firstOp<orrery::ConvOp>(stem)->getResult(0);
  orrery::LayoutCosts withBatch;
  withBatch.batchSplit = true;
  orrery::TensorParallelLayout batch =
      orrery::layoutByDynamicProgramming(stem, withBatch);
  EXPECT_TRUE(batch.batchSplit.contains(stemOut));
  EXPECT_TRUE(batch.columnParallel.empty());
  orrery::LayoutCosts noBatch;
  noBatch.batchSplit = false;
  orrery::TensorParallelLayout spatial =
      orrery::layoutByDynamicProgramming(stem, noBatch);
  EXPECT_TRUE(spatial.batchSplit.empty());
  EXPECT_TRUE(spatial.spatialSplit.contains(stemOut));
  // The layer still hands on a replicated tensor.
  Value out = stem.getBody().front().getTerminator()->getOperand(0);
  EXPECT_FALSE(spatial.spatialSplit.contains(out));
  EXPECT_FALSE(batch.batchSplit.contains(out));
}

TEST(Parallelism, WorkloadKeepsALayoutForMicroBatchesThatSplit) {
  // Imported per sample, ResNet-50 splits nothing across the group (launches
  // and latencies outweigh one sample's work); for micro-batches that split
  // evenly over the group its conv stages split the batch, laid out at as
  // many samples as the group has devices.
  MLIRContext ctx;
  orrery::Workload w = outline(ctx, "resnet50.onnx", 1);
  const orrery::LayerKind &stem = w.kinds[w.layers.front().kind];
  EXPECT_FALSE(stem.batchSplitInTp);
  ASSERT_TRUE(stem.batchSplitLayout);
  const orrery::LayerKind &split = *stem.batchSplitLayout;
  EXPECT_TRUE(split.batchSplitInTp);
  EXPECT_EQ(&stem.forMicroBatch(1, 2, true), &stem);
  EXPECT_EQ(&stem.forMicroBatch(3, 2, true), &stem);
  EXPECT_EQ(&stem.forMicroBatch(8, 1, true), &stem);
  EXPECT_GT(split.tpGradientParameters, 0);
  EXPECT_EQ(split.parameters, stem.parameters);
  // Batch-split weights stay whole on every tensor-parallel rank.
  EXPECT_EQ(split.replicatedParameters, split.parameters);
  EXPECT_EQ(&stem.forMicroBatch(4, 2, true), &split);
  EXPECT_EQ(&stem.forMicroBatch(4, 2, false), &stem); // tpbatch off
  // The simulator takes the layout that applies: with tpbatch=1 and mbs=8
  // on tp=2 the stem's work is split; without tpbatch it is not.
  auto c = orrery::parseClusterPreset("2xA100-80G",
                                      orrery::HardwareCatalog::builtin());
  ASSERT_TRUE(bool(c));
  auto on = orrery::parseStrategy("tp=2,mbs=8,gbs=8,tpbatch=1");
  auto off = orrery::parseStrategy("tp=2,mbs=8,gbs=8");
  ASSERT_TRUE(bool(on) && bool(off));
  auto rOn = orrery::simulateStep(w, *c, *on);
  auto rOff = orrery::simulateStep(w, *c, *off);
  ASSERT_TRUE(bool(rOn) && bool(rOff));
  size_t stemKind = w.layers.front().kind;
  EXPECT_LT(rOn->kindSecondsPerMicroBatch[stemKind],
            rOff->kindSecondsPerMicroBatch[stemKind]);
  EXPECT_NE(rOn->strategy.str().find("tpbatch=1"), std::string::npos);
}

/// An outlined module: @main feeds its input through one call of @head.
const char *kHeadOnly = R"(
module {
  func.func @main(%x: tensor<1x8x16xf16>) -> tensor<1x8x32xf16> {
    %w = orrery.weight "w" trainable : tensor<16x32xf16>
    %y = func.call @head(%x, %w) : (tensor<1x8x16xf16>, tensor<16x32xf16>) -> tensor<1x8x32xf16>
    return %y : tensor<1x8x32xf16>
  }
  func.func private @head(%x: tensor<1x8x16xf16>, %w: tensor<16x32xf16> {orrery.weight = true}) -> tensor<1x8x32xf16> {
    %y = orrery.matmul(%x, %w) : (tensor<1x8x16xf16>, tensor<16x32xf16>) -> tensor<1x8x32xf16>
    %z = orrery.identity(%y) : (tensor<1x8x32xf16>) -> tensor<1x8x32xf16>
    LOSS
    return %z : tensor<1x8x32xf16>
  }
}
)";

std::string headOnly(const std::string &loss) {
  std::string text = kHeadOnly;
  text.replace(text.find("LOSS"), 4, loss);
  return text;
}

TEST(Workload, TheStepEndsWithTheLossOfTheLogits) {
  // No loss in the graph: the head's kind gets Megatron's fp32 softmax
  // cross-entropy over its 256 logits: 5 FLOP per element each way, the
  // logits read, an fp32 copy and the log-probabilities written and kept.
  MLIRContext ctx;
  auto module = orrery::test::parse(ctx, headOnly(""));
  ASSERT_TRUE(module);
  auto w = orrery::buildWorkload(*module);
  ASSERT_TRUE(bool(w)) << llvm::toString(w.takeError());
  EXPECT_TRUE(w->hasImpliedLoss);
  const orrery::LayerKind &head = w->kinds.front();
  const orrery::OpCost &loss = head.ops.back();
  EXPECT_EQ(loss.name, "training_loss:softmax_cross_entropy");
  int64_t n = 256;
  EXPECT_EQ(loss.forwardFlops, 5 * n);
  EXPECT_EQ(loss.bytesRead, 2 * n + 4 * n);
  EXPECT_EQ(loss.bytesWritten, 8 * n);
  EXPECT_EQ(loss.backwardBytes, 12 * n + 2 * n);
  EXPECT_EQ(loss.kernelClass, orrery::KernelClass::Reduction);
  EXPECT_EQ(head.savedReplicatedBytes + head.savedShardedBytes +
                head.savedCoreBytes,
            4 * n + 2 * 8 * 16); // the log-probabilities, the matmul input
  // A graph with its own loss gets none added.
  MLIRContext ctx2;
  auto withLoss = orrery::test::parse(
      ctx2, headOnly("%l = orrery.onnx_op \"SoftmaxCrossEntropyLoss\" \"\" "
                     "(%y) : (tensor<1x8x32xf16>) -> tensor<f32>"));
  ASSERT_TRUE(withLoss);
  auto w2 = orrery::buildWorkload(*withLoss);
  ASSERT_TRUE(bool(w2)) << llvm::toString(w2.takeError());
  EXPECT_FALSE(w2->hasImpliedLoss);
  for (const orrery::OpCost &op : w2->kinds.front().ops)
    EXPECT_NE(op.name, "training_loss:softmax_cross_entropy");
}

TEST(Workload, BackwardMovesWhatTheGradientsNeed) {
  // Per op: dy is the result's gradient. A residual add passes dy through
  // (no kernel); a bias add sums it (one read); GELU reads dy and its input
  // and writes dx; softmax reads y and dy; dropout reads dy and its one-byte
  // mask; a layer norm reads x and dy twice (dx, then dγ and dβ); a scale
  // by a constant reads dy and writes dx; a product of two activations
  // reads dy and the other input for each input's gradient.
  MLIRContext ctx;
  auto module = orrery::test::parse(ctx, R"(
module {
  func.func @main(%x: tensor<1x8x16xf16>) -> tensor<1x8x16xf16> {
    %b = orrery.weight "b" trainable : tensor<16xf16>
    %g = orrery.weight "g" trainable : tensor<16xf16>
    %y = func.call @layer(%x, %b, %g) : (tensor<1x8x16xf16>, tensor<16xf16>, tensor<16xf16>) -> tensor<1x8x16xf16>
    return %y : tensor<1x8x16xf16>
  }
  func.func private @layer(%x: tensor<1x8x16xf16>, %b: tensor<16xf16> {orrery.weight = true}, %g: tensor<16xf16> {orrery.weight = true}) -> tensor<1x8x16xf16> {
    %n = orrery.layer_normalization(%x, %g, %b) {axis = -1 : i64} : (tensor<1x8x16xf16>, tensor<16xf16>, tensor<16xf16>) -> tensor<1x8x16xf16>
    %a = orrery.add(%n, %b) : (tensor<1x8x16xf16>, tensor<16xf16>) -> tensor<1x8x16xf16>
    %s = orrery.softmax(%a) {axis = -1 : i64} : (tensor<1x8x16xf16>) -> tensor<1x8x16xf16>
    %d = orrery.dropout(%s) : (tensor<1x8x16xf16>) -> tensor<1x8x16xf16>
    %e = orrery.gelu(%d) : (tensor<1x8x16xf16>) -> tensor<1x8x16xf16>
    %r = orrery.add(%e, %x) : (tensor<1x8x16xf16>, tensor<1x8x16xf16>) -> tensor<1x8x16xf16>
    %k = orrery.constant dense<0.5> : tensor<f16>
    %m = orrery.mul(%r, %k) : (tensor<1x8x16xf16>, tensor<f16>) -> tensor<1x8x16xf16>
    %p = orrery.mul(%m, %x) : (tensor<1x8x16xf16>, tensor<1x8x16xf16>) -> tensor<1x8x16xf16>
    return %p : tensor<1x8x16xf16>
  }
}
)");
  ASSERT_TRUE(module);
  auto w = orrery::buildWorkload(*module);
  ASSERT_TRUE(bool(w)) << llvm::toString(w.takeError());
  int64_t out = 2 * 8 * 16, elements = 8 * 16;
  const auto &ops = w->kinds.front().ops;
  ASSERT_EQ(ops.size(), 9u); // and the loss of @main's result
  EXPECT_EQ(ops.back().name, "training_loss:softmax_cross_entropy");
  auto backward = [&](size_t i) {
    return std::make_pair(ops[i].backwardBytes, ops[i].backwardKernels);
  };
  EXPECT_EQ(ops[0].name, "orrery.layer_normalization");
  EXPECT_EQ(backward(0), std::make_pair(5 * out, 2));
  EXPECT_EQ(backward(1), std::make_pair(out, 1));                // bias add
  EXPECT_EQ(backward(2), std::make_pair(3 * out, 1));            // softmax
  EXPECT_EQ(backward(3), std::make_pair(2 * out + elements, 1)); // dropout
  EXPECT_EQ(backward(4), std::make_pair(3 * out, 1));            // GELU
  EXPECT_EQ(backward(5), std::make_pair(int64_t(0), 0));         // residual
  EXPECT_EQ(backward(6), std::make_pair(2 * out + 2, 1));        // scale
  EXPECT_EQ(backward(7), std::make_pair(6 * out, 2));            // product
  // The kernel classes that set the memory-bound rate of each.
  EXPECT_EQ(ops[0].kernelClass, orrery::KernelClass::Reduction);
  EXPECT_EQ(ops[2].kernelClass, orrery::KernelClass::Reduction);
  EXPECT_EQ(ops[3].kernelClass, orrery::KernelClass::Random);
  EXPECT_EQ(ops[4].kernelClass, orrery::KernelClass::Pointwise);
}

} // namespace

// Fine-tuning on tiny-gpt (2 layers, d = 64, qkv [64, 192], out [64, 64],
// fc [64, 256], proj [256, 64]): LoRA rank 4 on the attention projections
// adds 4·(64 + 192) + 4·(64 + 64) = 1,536 parameters per layer, freezes
// every base weight, and leaves the frozen contractions only their input
// gradient (backward FLOPs = forward FLOPs); the embedding, which nothing
// before trains, runs no backward.
TEST(FineTuning, LoraAddsAdaptersAndFreezesTheBase) {
  using namespace orrery;
  mlir::MLIRContext ctx;
  Workload full = test::tinyGpt(ctx, KernelFusion::Fused);
  FineTuning ft;
  ft.loraRank = 4;
  ft.loraTargets = {"attention"};
  Workload lora = test::tinyGpt(ctx, KernelFusion::Fused, 1, ft);
  int64_t blocks = 0;
  for (const LayerRun &run : lora.layers)
    if (lora.kinds[run.kind].count > 1)
      blocks += run.count;
  ASSERT_GT(blocks, 0);
  EXPECT_EQ(lora.adapterParameters(), blocks * 1536);
  EXPECT_EQ(lora.parameters(), lora.adapterParameters());
  EXPECT_EQ(lora.frozenParameters(), full.parameters());
  int embeddings = 0;
  for (const LayerKind &k : lora.kinds) {
    if (k.count == 1 && k.ops.size() && k.ops.front().name.find("gather") !=
                                            std::string::npos) {
      ++embeddings;
      EXPECT_TRUE(k.noBackward) << k.name;
      EXPECT_EQ(k.backwardFlops, 0) << k.name;
      EXPECT_EQ(k.savedActivationBytes, 0) << k.name;
    }
    for (const OpCost &op : k.ops)
      if (op.weighted && op.name.rfind("lora:", 0) != 0 && !k.noBackward) {
        EXPECT_EQ(op.backwardFlops, op.forwardFlops) << k.name << " " << op.name;
      }
  }
  EXPECT_EQ(embeddings, 1);
  // --freeze by name: the first block's weights, and only them.
  FineTuning freeze;
  freeze.freeze = {"h.0"};
  Workload partial = test::tinyGpt(ctx, KernelFusion::Fused, 1, freeze);
  EXPECT_EQ(partial.parameters() + partial.frozenParameters(),
            full.parameters());
  EXPECT_EQ(partial.frozenParameters() * blocks,
            full.parameters() - [&] {
              int64_t onceOnly = 0;
              for (const LayerRun &run : full.layers)
                if (full.kinds[run.kind].count == 1)
                  onceOnly += full.kinds[run.kind].parameters;
              return onceOnly;
            }());
}

TEST(Parallelism, TheLossTakesTheLogitsSplitByVocabulary) {
  // Megatron-LM's vocab-parallel cross-entropy takes the head's logits
  // split by vocabulary (three all-reduces of a float a token), however
  // slow the link: on 4 GPUs over 6.25 GB/s (a T4 node's PCIe) gathering
  // GPT-3 125M's logits, [1024, 50257] in fp16, would cost more than the
  // split head saves, and that gather is what the layer boundary alone
  // would take.
  MLIRContext ctx;
  OwningOpRef<ModuleOp> module = outlined(ctx, "gpt3-125m.onnx");
  ASSERT_TRUE(module);
  orrery::LayoutCosts slow;
  slow.degree = 4;
  slow.secondsPerFlop = 1.0 / (65e12 * 0.8);
  slow.secondsPerByte = 1.0 / (320e9 * 0.8);
  slow.secondsPerAllReduceByte = 2.0 * 3 / 4 / 6.25e9;
  auto head = module->lookupSymbol<func::FuncOp>("head");
  ASSERT_TRUE(head);
  auto logitsProduct = [&](const orrery::TensorParallelLayout &l) {
    for (Operation &op : head.getBody().front())
      if (isa<orrery::MatMulOp>(op) && l.sharded.contains(op.getResult(0)))
        return true;
    return false;
  };
  EXPECT_FALSE(logitsProduct(orrery::layoutByDynamicProgramming(head, slow)));
  orrery::LayoutCosts lossFollows = slow;
  lossFollows.lossResult = 0;
  EXPECT_TRUE(
      logitsProduct(orrery::layoutByDynamicProgramming(head, lossFollows)));
  // The workload finds the loss itself: the head's product and the loss
  // split over the group.
  auto w = orrery::buildWorkload(*module, slow);
  ASSERT_TRUE(bool(w)) << llvm::toString(w.takeError());
  const orrery::LayerKind &kind = w->kinds.back();
  ASSERT_EQ(kind.name, "head");
  ASSERT_EQ(kind.ops.back().name, "training_loss:softmax_cross_entropy");
  EXPECT_TRUE(kind.ops.back().tensorParallel);
  EXPECT_TRUE(llvm::any_of(kind.ops, [](const orrery::OpCost &op) {
    return op.contraction && op.tensorParallel && op.gemmN > 0 &&
           op.gemmN * 4 >= 50257;
  }));
  // Its three all-reduces of a float a token.
  EXPECT_EQ(kind.ops.back().tpAllReduceForwardBytes,
            3 * 4 * w->tokensPerSample * w->batchSize);
  EXPECT_EQ(kind.ops.back().tpAllReducesForward, 3);
  EXPECT_EQ(kind.ops.back().tpAllReduceBackwardBytes, 0);
}
