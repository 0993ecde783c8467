//===- UpstreamForm.h - a sharded module in upstream MLIR dialects only ---===//
#ifndef ORRERY_TRANSFORMS_UPSTREAMFORM_H
#define ORRERY_TRANSFORMS_UPSTREAMFORM_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>

namespace orrery {

/// Rewrites a module annotated by annotateShardings in upstream dialects only
/// (func, arith, math, tensor, linalg, shard), so that stock `mlir-opt` reads
/// it and its `sharding-propagation` and `shard-partition` passes run on it
/// (after `inline`: a `func.call` has no sharding rule upstream).
///
/// Every value is written with one dim per factor of DimFactors, so reshapes
/// and unit dims vanish and every op is a `linalg.generic` whose indexing
/// maps are projected permutations: element-wise ops, contractions (matmul,
/// attention's two products), reductions (norms, softmax), a split or concat
/// as a contraction with a one-hot selector, RoPE's rotate-half as one with a
/// 2 x 2 rotation, an embedding lookup as one with the row index. Weights in
/// @main become its trailing arguments named `orrery.name`. A split the plan
/// puts on a dim lands on that dim's attention-heads factor where it has one,
/// else on its first factor the axes divide. Dropout is left out (no random
/// numbers upstream). Returns null with a one-line reason in `error` for an
/// op that has no such form.
mlir::OwningOpRef<mlir::ModuleOp> upstreamForm(mlir::ModuleOp module,
                                               std::string &error);

} // namespace orrery

#endif // ORRERY_TRANSFORMS_UPSTREAMFORM_H
