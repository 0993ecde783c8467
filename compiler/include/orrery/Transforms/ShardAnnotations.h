//===- ShardAnnotations.h - a plan's shardings in MLIR's shard dialect ----===//
#ifndef ORRERY_TRANSFORMS_SHARDANNOTATIONS_H
#define ORRERY_TRANSFORMS_SHARDANNOTATIONS_H

#include "orrery/Workload/Parallelism.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace orrery {

/// The device grid of a plan: axes from slowest- to fastest-varying rank
/// ("pp", "dp", "cp", "tp") and their sizes.
struct ShardGrid {
  std::vector<std::string> axes;
  std::vector<int64_t> sizes;
};

/// Annotates an outlined module with upstream `shard` dialect ops: a
/// `shard.grid @orrery_grid` of the plan's devices and, at the entry of each
/// layer function, `shard.shard` of every argument: weights split as
/// Megatron splits them over the "tp" axis (column-parallel on their output
/// dimension, row-parallel on their input dimension, embeddings on the
/// vocabulary), activations split on their batch dimension over the "dp"
/// axis; what does not divide stays replicated. Calls in @main carry
/// `orrery.stage`: chunk c of `chunkLayers` (layers per pipeline chunk, in
/// model order) runs on stage c % `stages`. MLIR's own sharding propagation
/// and partition passes can take it from there.
void annotateShardings(mlir::ModuleOp module, const ShardGrid &grid,
                       const std::vector<int> &chunkLayers, int stages,
                       const LayoutCosts &costs = {});

} // namespace orrery

#endif // ORRERY_TRANSFORMS_SHARDANNOTATIONS_H
