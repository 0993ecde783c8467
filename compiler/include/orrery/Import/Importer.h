//===- Importer.h - GraphDesc → orrery dialect
//-----------------------------===//
#ifndef ORRERY_IMPORT_IMPORTER_H
#define ORRERY_IMPORT_IMPORTER_H

#include "orrery/Onnx/GraphDesc.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"

namespace orrery {

/// Builds a module with one `func.func @main` holding the model as orrery
/// ops. The module carries the source path, opset and bound dims as
/// attributes. Fails with a one-line message when the model uses a type the
/// dialect cannot hold or the result does not verify.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importModel(mlir::MLIRContext &context, const onnx::ModelDesc &model);

/// Loads an .onnx file and imports it: the whole front end in one call.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importOnnxFile(mlir::MLIRContext &context, const std::string &path,
               const onnx::LoadOptions &options);

/// Registers every dialect an imported or outlined module uses.
void registerOrreryDialects(mlir::MLIRContext &context);

} // namespace orrery

#endif // ORRERY_IMPORT_IMPORTER_H
