//===- OrreryDialect.cpp - registration and generic op code ---------------===//
#include "orrery/Dialect/OrreryDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;
using namespace orrery;

#include "orrery/Dialect/OrreryDialect.cpp.inc"

void OrreryDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "orrery/Dialect/OrreryOps.cpp.inc"
      >();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

#include "orrery/Dialect/CostOpInterface.cpp.inc"

#define GET_OP_CLASSES
#include "orrery/Dialect/OrreryOps.cpp.inc"
