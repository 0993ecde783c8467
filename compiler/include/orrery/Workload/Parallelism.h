//===- Parallelism.h - Megatron's tensor-parallel layout of a layer -------===//
#ifndef ORRERY_WORKLOAD_PARALLELISM_H
#define ORRERY_WORKLOAD_PARALLELISM_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace orrery {

/// How tensor parallelism splits one layer function: a contraction with a
/// weight whose activation input is replicated is column-parallel (its
/// output is split), one whose input is split is row-parallel (its output
/// is all-reduced and replicated); every other op is split when any of its
/// activation operands is; an embedding lookup is vocabulary-parallel.
struct TensorParallelLayout {
  /// Values split across the tensor-parallel group.
  llvm::DenseSet<mlir::Value> sharded;
  /// Weighted contractions: true = column-parallel, false = row-parallel.
  llvm::DenseMap<mlir::Operation *, bool> columnParallel;
  /// Embedding lookups split along the vocabulary.
  llvm::DenseSet<mlir::Operation *> vocabParallel;
};

/// True for MatMul, Gemm, Conv, ConvTranspose.
bool isContractionOp(mlir::Operation *op);
/// True when an op has a weight (or weight-derived) tensor operand.
bool hasWeightOperand(mlir::Operation *op);

TensorParallelLayout layoutTensorParallel(mlir::func::FuncOp layer);

} // namespace orrery

#endif // ORRERY_WORKLOAD_PARALLELISM_H
