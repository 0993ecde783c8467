//===- TensorBuilder.h - the ops the expert rewrites write ----------------===//
//
// Shape constants, reshapes, gathers and transposes at one insertion point,
// for the rewrites that put mixture-of-experts layers into the dispatched
// form (FormExperts.cpp, ExpertLoop.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_TRANSFORMS_TENSORBUILDER_H
#define ORRERY_TRANSFORMS_TENSORBUILDER_H

#include "orrery/Dialect/OrreryDialect.h"

#include "mlir/IR/Builders.h"

namespace orrery {

struct TensorBuilder {
  mlir::OpBuilder b;
  mlir::Location loc;

  mlir::Value i64s(llvm::ArrayRef<int64_t> dims) {
    auto t =
        mlir::RankedTensorType::get({int64_t(dims.size())}, b.getI64Type());
    return ConstantOp::create(b, loc, t, mlir::DenseElementsAttr::get(t, dims));
  }
  /// Zeros of `shape`: the indices of a dispatch whose rows are data.
  mlir::Value zeros(llvm::ArrayRef<int64_t> shape) {
    auto t = mlir::RankedTensorType::get(shape, b.getI64Type());
    return ConstantOp::create(
        b, loc, t, mlir::DenseElementsAttr::get(t, llvm::APInt(64, 0)));
  }
  mlir::Value reshape(mlir::Value x, llvm::ArrayRef<int64_t> shape) {
    auto t = mlir::RankedTensorType::get(
        shape,
        mlir::cast<mlir::RankedTensorType>(x.getType()).getElementType());
    return ReshapeOp::create(b, loc, mlir::TypeRange{t},
                             mlir::ValueRange{x, i64s(shape)},
                             llvm::ArrayRef<mlir::NamedAttribute>{})
        ->getResult(0);
  }
  /// Rows of the 2-D `x` at `rows` indices (what they are is data).
  mlir::Value gatherRows(mlir::Value x, llvm::ArrayRef<int64_t> rows) {
    auto xt = mlir::cast<mlir::RankedTensorType>(x.getType());
    llvm::SmallVector<int64_t> shape(rows);
    shape.push_back(xt.getDimSize(1));
    auto t = mlir::RankedTensorType::get(shape, xt.getElementType());
    return GatherOp::create(b, loc, mlir::TypeRange{t},
                            mlir::ValueRange{x, zeros(rows)},
                            llvm::ArrayRef<mlir::NamedAttribute>{
                                b.getNamedAttr("axis", b.getI64IntegerAttr(0))})
        ->getResult(0);
  }
  mlir::Value transpose(mlir::Value x, llvm::ArrayRef<int64_t> perm) {
    auto xt = mlir::cast<mlir::RankedTensorType>(x.getType());
    llvm::SmallVector<int64_t> shape;
    for (int64_t p : perm)
      shape.push_back(xt.getDimSize(p));
    auto t = mlir::RankedTensorType::get(shape, xt.getElementType());
    return TransposeOp::create(
               b, loc, mlir::TypeRange{t}, mlir::ValueRange{x},
               llvm::ArrayRef<mlir::NamedAttribute>{
                   b.getNamedAttr("perm", b.getDenseI64ArrayAttr(perm))})
        ->getResult(0);
  }
  /// The op `like` is, on other operands, result types and attributes.
  mlir::Operation *make(mlir::Operation *like, mlir::ValueRange operands,
                        mlir::TypeRange types,
                        llvm::ArrayRef<mlir::NamedAttribute> attrs) {
    mlir::OperationState state(loc, like->getName());
    state.addOperands(operands);
    state.addTypes(types);
    state.addAttributes(attrs);
    return b.create(state);
  }
};

} // namespace orrery

#endif // ORRERY_TRANSFORMS_TENSORBUILDER_H
