//===- TestSupport.h - helpers shared by the unit tests -------------------===//
#ifndef ORRERY_TESTS_UNIT_TESTSUPPORT_H
#define ORRERY_TESTS_UNIT_TESTSUPPORT_H

#include "orrery/Import/Importer.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <string>

namespace orrery::test {

/// The source tree, for fixtures (set by CMake).
inline std::string sourceDir() { return ORRERY_SOURCE_DIR; }

/// Parses MLIR text with the orrery dialects loaded.
inline mlir::OwningOpRef<mlir::ModuleOp> parse(mlir::MLIRContext &ctx,
                                               const std::string &text) {
  registerOrreryDialects(ctx);
  return mlir::parseSourceString<mlir::ModuleOp>(text, &ctx);
}

} // namespace orrery::test

#endif
