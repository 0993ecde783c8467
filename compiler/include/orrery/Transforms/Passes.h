//===- Passes.h - orrery passes -------------------------------------------===//
#ifndef ORRERY_TRANSFORMS_PASSES_H
#define ORRERY_TRANSFORMS_PASSES_H

#include "orrery/Dialect/OrreryDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace orrery {
#define GEN_PASS_DECL
#include "orrery/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "orrery/Transforms/Passes.h.inc"

/// The front end after import, as `orrery import --outline` runs it:
/// kernel fusion when `fuse` (its attention patterns when `attention`),
/// then layer outlining. Empty, or the first diagnostic of a failure.
std::string fuseAndOutline(mlir::ModuleOp module, bool fuse, bool attention,
                           bool others = true);
} // namespace orrery

#endif // ORRERY_TRANSFORMS_PASSES_H
