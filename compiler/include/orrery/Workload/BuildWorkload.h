//===- BuildWorkload.h - outlined module → Workload -----------------------===//
#ifndef ORRERY_WORKLOAD_BUILDWORKLOAD_H
#define ORRERY_WORKLOAD_BUILDWORKLOAD_H

#include "orrery/CostModel/Workload.h"
#include "orrery/Workload/Parallelism.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

namespace orrery {

/// Counts the ops of an imported module by op name (onnx_op by its ONNX
/// type), walking into control-flow bodies. Call before outlining.
std::map<std::string, int64_t> opHistogram(mlir::ModuleOp module);

/// Reads the layer sequence of a module that `orrery-outline-layers` has
/// run on: @main's calls in order, each callee a layer kind. Each layer's
/// tensor-parallel layout is chosen with `costs` (those of the cluster's
/// devices and intra-node link, when known). `kernels` says which stack
/// runs it: the caller runs `orrery-fuse-kernels` first unless it is
/// Eager, and Eager prices every op as a kernel of its own.
/// `fineTuning` says which weights train (docs/finetuning.md).
llvm::Expected<Workload> buildWorkload(mlir::ModuleOp module,
                                       const LayoutCosts &costs = {},
                                       KernelFusion kernels = KernelFusion::Fused,
                                       const FineTuning &fineTuning = {});

/// ONNX ops without a rule of the dialect that the workload prices anyway:
/// a graph's own training loss (SoftmaxCrossEntropyLoss priced as the
/// implied loss, NegativeLogLikelihoodLoss as its gather).
bool isPricedLossOp(llvm::StringRef onnxOpType);

} // namespace orrery

#endif // ORRERY_WORKLOAD_BUILDWORKLOAD_H
