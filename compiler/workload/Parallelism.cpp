//===- Parallelism.cpp - Megatron's tensor-parallel layout of a layer -----===//
//
// For GPT this finds QKV and FC1 column-parallel, the output projection and
// FC2 row-parallel: four all-reduces per layer, two forward, two backward.
//
//===----------------------------------------------------------------------===//
#include "orrery/Workload/Parallelism.h"
#include "orrery/Dialect/OrreryDialect.h"

using namespace mlir;

namespace orrery {

bool isContractionOp(Operation *op) {
  return isa<MatMulOp, GemmOp, ConvOp, ConvTransposeOp>(op);
}

bool hasWeightOperand(Operation *op) {
  return llvm::any_of(op->getOperands(), [](Value v) {
    return isa<RankedTensorType>(v.getType()) && !isActivation(v) &&
           !v.getDefiningOp<ConstantOp>();
  });
}

TensorParallelLayout layoutTensorParallel(func::FuncOp layer) {
  TensorParallelLayout l;
  auto anySharded = [&](Operation *op) {
    return llvm::any_of(op->getOperands(),
                        [&](Value v) { return l.sharded.contains(v); });
  };
  for (Operation &op : layer.getBody().front().without_terminator()) {
    if (!isa<CostOpInterface>(op) || isa<ConstantOp, NoneOp, WeightOp>(op))
      continue;
    bool split = false;
    if (isContractionOp(&op) && hasWeightOperand(&op)) {
      bool row = anySharded(&op);
      l.columnParallel[&op] = !row;
      split = !row;
    } else if (isa<GatherOp>(op) && op.getNumOperands() &&
               !isActivation(op.getOperand(0))) {
      l.vocabParallel.insert(&op);
    } else {
      split = anySharded(&op);
    }
    if (split)
      for (Value r : op.getResults())
        l.sharded.insert(r);
  }
  return l;
}

} // namespace orrery
