//===- RecomputeModules.h - Megatron's selective-recompute modules -------===//
//
// Which ops of a layer function each of Megatron-Core's --recompute-modules
// checkpoints (Strategy's RecomputeModule bits, docs/strategy.md
// recompute_modules), read from the graph's structure.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_WORKLOAD_RECOMPUTEMODULES_H
#define ORRERY_WORKLOAD_RECOMPUTEMODULES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

namespace orrery {

/// The RecomputeModule bits of each op of `layer` that some module holds
/// (the attention core is OpCost::attentionCore's, not listed here).
llvm::DenseMap<mlir::Operation *, unsigned>
recomputeModulesOf(mlir::func::FuncOp layer);

} // namespace orrery

#endif
