//===- RecomputeModules.cpp - Megatron's selective-recompute modules -----===//
//
// Megatron-Core (core_v0.14-0.16) checkpoints, per module:
//  - mla_up_proj (multi_latent_attention.py, CheckpointWithoutOutput of
//    qkv_up_proj_and_rope_apply): the up-projections from the normalised
//    latents, the rotary parts and the concatenations that make Q, K and V;
//    the latents are kept, Q, K and V dropped after the attention;
//  - moe_act (experts.py, TEGroupedMLP): the activation between the
//    experts' fc1 and fc2; fc1's output kept, fc2's input dropped;
//  - mlp (transformer_layer.py): a dense layer's MLP, from the pre-MLP
//    norm's output (kept) to the residual add;
//  - moe (moe_layer.py): a mixture-of-experts layer's MLP, router,
//    dispatch, experts, combine and shared experts, likewise;
//  - shared_experts (moe_layer.py): the shared experts' MLP alone.
//
//===----------------------------------------------------------------------===//
#include "RecomputeModules.h"
#include "orrery/CostModel/Strategy.h"
#include "orrery/Dialect/OrreryDialect.h"
#include "orrery/Workload/Parallelism.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

using namespace mlir;

namespace orrery {
namespace {

bool isNorm(Operation *op) {
  return isa<RmsNormalizationOp, LayerNormalizationOp>(op);
}

bool isWeightedContraction(Operation *op) {
  return isContractionOp(op) && hasWeightOperand(op);
}

int64_t lastDim(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.getRank() ? t.getDimSize(t.getRank() - 1) : 0;
}

/// mla_up_proj: back from a latent attention's Q, K and V to the
/// up-projections, which read the latents (narrower than the hidden
/// state); the down-projections (reading the hidden state) and the norms
/// stay outside.
void markLatentUpProjections(FusedAttentionOp attention, int64_t hidden,
                             llvm::DenseMap<Operation *, unsigned> &bits) {
  llvm::SmallVector<Value> work{attention.getQuery(), attention.getKey(),
                                attention.getValue()};
  llvm::DenseSet<Operation *> seen;
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || isNorm(def) || !seen.insert(def).second ||
        isa<WeightOp, ConstantOp>(def))
      continue;
    if (isWeightedContraction(def)) {
      Value in;
      for (Value o : def->getOperands())
        if (isActivation(o))
          in = o;
      if (in && lastDim(in) != hidden)
        bits[def] |= kRecomputeMlaUpProj;
      continue; // the latent (or the hidden state) is its input, kept
    }
    bits[def] |= kRecomputeMlaUpProj;
    for (Value o : def->getOperands())
      if (isActivation(o))
        work.push_back(o);
  }
}

/// moe_act: the ops from the experts' fc1 to their fc2.
void markExpertActivations(func::FuncOp layer,
                           llvm::DenseMap<Operation *, unsigned> &bits) {
  llvm::DenseSet<Value> fromExperts;
  for (Operation &op : layer.getBody().front().without_terminator()) {
    if (isExpertGemm(&op)) {
      // fc1 (and fc3): its output starts the activation; fc2, which reads
      // the activation, ends it.
      if (!fromExperts.contains(op.getOperand(0)))
        fromExperts.insert(op.getResult(0));
      continue;
    }
    if (isContractionOp(&op) || op.getNumResults() == 0)
      continue;
    // Elementwise on the experts' tokens (the router's weights may join:
    // Megatron applies them in the fused bias-activation).
    bool any = false;
    for (Value o : op.getOperands())
      any |= fromExperts.contains(o) &&
             o.getType() == op.getResult(0).getType();
    if (any) {
      bits[&op] |= kRecomputeMoeAct;
      for (Value r : op.getResults())
        fromExperts.insert(r);
    }
  }
}

/// The MLP block a pre-MLP norm starts: the ops after it that its output
/// reaches before the residual add (which also reads what came before the
/// norm). Empty when the block holds attention (an input norm's).
llvm::SmallVector<Operation *> mlpBlock(Operation *norm) {
  llvm::DenseSet<Value> inside{norm->getResult(0)};
  llvm::SmallVector<Operation *> block;
  for (Operation *op = norm->getNextNode(); op; op = op->getNextNode()) {
    if (op->hasTrait<OpTrait::IsTerminator>())
      break;
    bool reads = false, readsOutside = false;
    for (Value o : op->getOperands()) {
      if (inside.contains(o))
        reads = true;
      else if (isActivation(o))
        readsOutside = true;
    }
    if (!reads)
      continue;
    if (readsOutside && isa<AddOp>(op))
      break; // the residual add
    if (isa<FusedAttentionOp>(op) || isScoreProduct(op))
      return {};
    block.push_back(op);
    for (Value r : op->getResults())
      inside.insert(r);
  }
  return block;
}

/// Of a mixture-of-experts block, the ops that neither lead to the
/// experts (router, dispatch) nor follow what does (the routing weights,
/// combine): the shared experts.
void markSharedExperts(llvm::ArrayRef<Operation *> block,
                       llvm::DenseMap<Operation *, unsigned> &bits) {
  llvm::DenseSet<Operation *> inBlock(block.begin(), block.end()), routed;
  // Back from the expert GEMMs: the router and the dispatch.
  llvm::SmallVector<Operation *> work;
  for (Operation *op : block)
    if (isExpertGemm(op) && routed.insert(op).second)
      work.push_back(op);
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    for (Value o : op->getOperands())
      if (Operation *def = o.getDefiningOp();
          def && inBlock.contains(def) && routed.insert(def).second)
        work.push_back(def);
  }
  // Forward from all of those.
  for (Operation *op : block)
    for (Value o : op->getOperands())
      if (Operation *def = o.getDefiningOp(); def && routed.contains(def))
        routed.insert(op);
  for (Operation *op : block)
    if (!routed.contains(op))
      bits[op] |= kRecomputeSharedExperts;
}

} // namespace

llvm::DenseMap<Operation *, unsigned> recomputeModulesOf(func::FuncOp layer) {
  llvm::DenseMap<Operation *, unsigned> bits;
  int64_t hidden = 0;
  for (BlockArgument a : layer.getArguments())
    if (isActivation(a)) {
      hidden = lastDim(a);
      break;
    }
  Block &body = layer.getBody().front();
  for (Operation &op : body.without_terminator())
    if (auto attention = dyn_cast<FusedAttentionOp>(op);
        attention && attention.getLatentDim())
      markLatentUpProjections(attention, hidden, bits);
  markExpertActivations(layer, bits);
  for (Operation &op : body.without_terminator()) {
    if (!isNorm(&op))
      continue;
    llvm::SmallVector<Operation *> block = mlpBlock(&op);
    if (block.empty() || llvm::none_of(block, isWeightedContraction))
      continue;
    bool experts = llvm::any_of(block, isExpertGemm);
    for (Operation *b : block)
      bits[b] |= experts ? kRecomputeMoe : kRecomputeMlp;
    if (experts)
      markSharedExperts(block, bits);
  }
  return bits;
}

} // namespace orrery
