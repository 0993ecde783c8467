//===- ShardAnnotations.cpp - a plan's shardings in MLIR's shard dialect --===//
#include "orrery/Transforms/ShardAnnotations.h"
#include "orrery/Dialect/OrreryDialect.h"
#include "orrery/Workload/Parallelism.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"

using namespace mlir;

namespace orrery {

void annotateShardings(ModuleOp module, const ShardGrid &grid,
                       const std::vector<int> &chunkLayers, int stages,
                       const LayoutCosts &costs) {
  module->getContext()->loadDialect<shard::ShardDialect>();
  OpBuilder b(module.getContext());
  b.setInsertionPointToStart(module.getBody());
  const char *gridName = "orrery_grid";
  shard::GridOp::create(b, module.getLoc(), gridName, grid.sizes);
  auto axisOf = [&](const std::string &name) -> int {
    for (size_t i = 0; i < grid.axes.size(); ++i)
      if (grid.axes[i] == name && grid.sizes[i] > 1)
        return int(i);
    return -1;
  };
  int tpAxis = axisOf("tp"), dpAxis = axisOf("dp");
  // Activations are split over dp on their batch dimension: the leading dim
  // of @main's first input (a causal mask passed to each layer is not).
  int64_t batch = -1;
  if (auto main = module.lookupSymbol<func::FuncOp>("main"))
    if (main.getNumArguments())
      if (auto t = dyn_cast<RankedTensorType>(main.getArgument(0).getType());
          t && t.getRank())
        batch = t.getDimSize(0);

  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal() || func.getSymName() == "main")
      continue;
    TensorParallelLayout layout = layoutByDynamicProgramming(func, costs);
    llvm::DenseMap<BlockArgument, int> weightDim =
        splitWeightDims(func, layout);

    Block &entry = func.getBody().front();
    b.setInsertionPointToStart(&entry);
    for (BlockArgument arg : entry.getArguments()) {
      auto t = dyn_cast<RankedTensorType>(arg.getType());
      if (!t || t.getRank() == 0)
        continue;
      SmallVector<shard::GridAxesAttr> split(t.getRank(),
                                             b.getDenseI16ArrayAttr({}));
      int axis = -1, dim = -1;
      if (isWeight(arg)) {
        auto it = weightDim.find(arg);
        if (it != weightDim.end() && tpAxis >= 0) {
          axis = tpAxis;
          dim = it->second;
        }
      } else if (dpAxis >= 0 && t.getDimSize(0) == batch) {
        axis = dpAxis;
        dim = 0;
      }
      if (axis >= 0 && t.getDimSize(dim) % grid.sizes[axis] == 0)
        split[dim] = b.getDenseI16ArrayAttr({int16_t(axis)});
      // The shard dialect wants trailing unsplit dims dropped.
      while (split.size() > 1 && split.back().empty())
        split.pop_back();
      auto sharding =
          shard::ShardingOp::create(b, func.getLoc(), gridName, split);
      auto sharded =
          shard::ShardOp::create(b, func.getLoc(), arg, sharding, true);
      arg.replaceAllUsesExcept(sharded, sharded);
    }

    // Values the layout splits by batch (dim 0 over dp and tp) or
    // spatially (dim 0 over dp, the first spatial dim over tp): annotated
    // where they are produced, so propagation need not guess them from
    // weights that stay whole.
    if (tpAxis < 0)
      continue;
    for (Operation &op : llvm::make_early_inc_range(entry)) {
      if (op.getNumResults() == 0 || isa<shard::ShardOp>(op))
        continue;
      Value r = op.getResult(0);
      bool byBatch = layout.batchSplit.contains(r),
           bySpace = layout.spatialSplit.contains(r);
      auto t = dyn_cast<RankedTensorType>(r.getType());
      if ((!byBatch && !bySpace) || !t || t.getRank() < (bySpace ? 3 : 1))
        continue;
      SmallVector<shard::GridAxesAttr> split(t.getRank(),
                                             b.getDenseI16ArrayAttr({}));
      bool dpBatch = dpAxis >= 0 && t.getDimSize(0) == batch;
      int64_t dpSize = dpBatch ? grid.sizes[dpAxis] : 1;
      if (byBatch) {
        if (t.getDimSize(0) % (dpSize * grid.sizes[tpAxis]))
          continue;
        SmallVector<int16_t> axes;
        if (dpBatch)
          axes.push_back(int16_t(dpAxis));
        axes.push_back(int16_t(tpAxis));
        split[0] = b.getDenseI16ArrayAttr(axes);
      } else {
        if (t.getDimSize(2) % grid.sizes[tpAxis] ||
            t.getDimSize(0) % dpSize)
          continue;
        if (dpBatch)
          split[0] = b.getDenseI16ArrayAttr({int16_t(dpAxis)});
        split[2] = b.getDenseI16ArrayAttr({int16_t(tpAxis)});
      }
      while (split.size() > 1 && split.back().empty())
        split.pop_back();
      b.setInsertionPointAfter(&op);
      auto sharding = shard::ShardingOp::create(b, op.getLoc(), gridName, split);
      auto sharded = shard::ShardOp::create(b, op.getLoc(), r, sharding, false);
      r.replaceAllUsesExcept(sharded, sharded);
    }
  }

  // Pipeline stages on the calls of @main.
  if (auto main = module.lookupSymbol<func::FuncOp>("main")) {
    size_t chunk = 0;
    int left = chunkLayers.empty() ? INT32_MAX : chunkLayers[0];
    for (auto call : main.getOps<func::CallOp>()) {
      while (left == 0 && chunk + 1 < chunkLayers.size())
        left = chunkLayers[++chunk];
      call->setAttr("orrery.stage",
                    b.getI64IntegerAttr(int64_t(chunk) % std::max(1, stages)));
      --left;
    }
  }
}

} // namespace orrery
