//===- BuildWorkload.cpp - outlined module → Workload ---------------------===//
#include "orrery/Workload/BuildWorkload.h"
#include "orrery/Dialect/OrreryDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;

namespace orrery {

static std::string histogramKey(Operation *op) {
  if (auto unknown = dyn_cast<OnnxOp>(op))
    return "onnx_op:" + unknown.getOpType().str();
  StringRef name = op->getName().getStringRef();
  name.consume_front("orrery.");
  return name.str();
}

std::map<std::string, int64_t> opHistogram(ModuleOp module) {
  std::map<std::string, int64_t> hist;
  module.walk([&](Operation *op) {
    if (isa<CostOpInterface>(op) &&
        !isa<WeightOp, ConstantOp, NoneOp, YieldOp>(op))
      hist[histogramKey(op)]++;
  });
  return hist;
}

static LayerKind measureKind(func::FuncOp func) {
  LayerKind kind;
  kind.name = func.getSymName().str();
  RegionCost cost = sumRegionCost(func.getBody());
  kind.forwardFlops = cost.forwardFlops;
  kind.backwardFlops = cost.backwardFlops;
  kind.bytesRead = cost.bytesRead;
  kind.bytesWritten = cost.bytesWritten;
  kind.savedActivationBytes = cost.savedBytes;
  func.walk([&](Operation *op) {
    if (isa<CostOpInterface>(op) && !isa<ConstantOp, NoneOp, YieldOp>(op))
      kind.numOps++;
    if (isa<OnnxOp>(op))
      kind.opsWithoutCostFormula++;
  });
  return kind;
}

llvm::Expected<Workload> buildWorkload(ModuleOp module) {
  auto main = module.lookupSymbol<func::FuncOp>("main");
  if (!main || main.isExternal())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "module has no function @main");
  Workload w;
  if (auto src = module->getAttrOfType<StringAttr>("orrery.source"))
    w.source = src.str();
  if (main.getNumArguments() > 0) {
    auto first = dyn_cast<RankedTensorType>(main.getArgument(0).getType());
    if (first && first.getRank() >= 1)
      w.batchSize = std::max<int64_t>(1, first.getDimSize(0));
    if (first && first.getRank() == 2 && first.getElementType().isInteger())
      w.tokensPerSample = first.getDimSize(1);
  }
  std::map<std::string, size_t> kindIndex;
  llvm::DenseSet<Value> countedWeights;
  for (Operation &op : main.getBody().front()) {
    auto call = dyn_cast<func::CallOp>(op);
    if (!call)
      continue;
    auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
    if (!callee)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "call to unknown function @" +
                                         call.getCallee().str());
    auto [it, inserted] =
        kindIndex.try_emplace(callee.getSymName().str(), w.kinds.size());
    if (inserted)
      w.kinds.push_back(measureKind(callee));
    LayerKind &kind = w.kinds[it->second];
    kind.count++;
    if (kind.count == 1) {
      // Weights of the first instance, each counted where first used (a tied
      // embedding counts in the embedding, not again in the head).
      for (Value arg : call.getOperands()) {
        auto weight = arg.getDefiningOp<WeightOp>();
        if (!weight || !countedWeights.insert(arg).second)
          continue;
        (weight.getTrainable() ? kind.parameters : kind.buffers) +=
            numElements(arg.getType());
      }
    } else {
      for (Value arg : call.getOperands())
        if (arg.getDefiningOp<WeightOp>())
          countedWeights.insert(arg);
    }
    if (!w.layers.empty() && w.layers.back().kind == it->second)
      w.layers.back().count++;
    else
      w.layers.push_back({it->second, 1});
  }
  if (w.kinds.empty())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "@main has no layers: run orrery-outline-layers first");
  // Costs saturate instead of overflowing; a saturated figure is an error,
  // never a number to plan with.
  for (int64_t total : {w.forwardFlops(), w.backwardFlops(),
                        w.savedActivationBytes(), w.parameters(), w.buffers()})
    if (total == INT64_MAX)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "a cost of one step exceeds 2^63 FLOPs "
                                     "or bytes; bind smaller dims");
  return w;
}

} // namespace orrery
