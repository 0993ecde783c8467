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
} // namespace orrery

#endif // ORRERY_TRANSFORMS_PASSES_H
