//===- ExpertLoop.h - transformers' per-expert loop as one expert layer ---===//
#ifndef ORRERY_TRANSFORMS_EXPERTLOOP_H
#define ORRERY_TRANSFORMS_EXPERTLOOP_H

#include "mlir/IR/BuiltinOps.h"

namespace orrery {
/// Rewrites every mixture-of-experts layer written as transformers' eager
/// per-expert loop (one NonZero of the router's one-hot mask per expert,
/// each expert's rows gathered, run through its own weights and scattered
/// back) into one batched expert layer over stacked [E, ...] weights, as
/// the generator's MoE and Megatron-Core's grouped MLP write it. Layers
/// whose iterations are not alike op for op stay as written.
void formExpertLoops(mlir::ModuleOp module);
} // namespace orrery

#endif // ORRERY_TRANSFORMS_EXPERTLOOP_H
