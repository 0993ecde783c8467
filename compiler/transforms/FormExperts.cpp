//===- FormExperts.cpp - mixture-of-experts as exporters write it ---------===//
//
// transformers' batched experts select one expert matrix per routed token
// (a Gather of the [E, p, q] expert weights by the router's TopK indices)
// and multiply it by that token alone. The graph then holds one matrix per
// routed token (4,096 copies of a 7168x1024 matrix in a 2,048-token Mixtral
// layer) where a framework runs one grouped GEMM over the tokens dispatched
// to each expert. The rewrite writes that dispatched form, the one the
// generator's MoE and Megatron-Core's grouped MLP use and the cost model
// prices ([E, C, K] tokens x [E, K, N] experts; see isExpertGemm):
//
//   %sel = gather(%w, %ids)          %X = reshape(%x) : [E, S/E, q]
//   %y = matmul(%sel, %x)      ==>   %Y = matmul(%X, transpose(%w))
//                                    %y = reshape(%Y) : [S, p, 1]
//
//===----------------------------------------------------------------------===//
#include "ExpertLoop.h"
#include "TensorBuilder.h"
#include "orrery/Transforms/Passes.h"

namespace orrery {
#define GEN_PASS_DEF_FORMEXPERTSPASS
#include "orrery/Transforms/Passes.h.inc"
} // namespace orrery

using namespace mlir;
using namespace orrery;

namespace {

RankedTensorType staticType(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.hasStaticShape() ? t : nullptr;
}

/// Whether `v` holds a TopK's indices, flattened, cast or sliced.
bool fromTopKIndices(Value v) {
  for (int depth = 0; depth < 16; ++depth) {
    Operation *def = v.getDefiningOp();
    if (!def)
      return false;
    if (auto onnx = dyn_cast<OnnxOp>(def))
      return onnx.getOpType() == "TopK" && def->getNumResults() == 2 &&
             v == def->getResult(1);
    if (!isa<ReshapeOp, UnsqueezeOp, SqueezeOp, FlattenOp, CastOp, ExpandOp,
             TransposeOp, SliceOp, IdentityOp>(def))
      return false;
    v = def->getOperand(0);
  }
  return false;
}

/// The [E, p, q] expert weights that `sel` ([S, p, q]) selects row by row
/// with the router's indices (Gather on axis 0, or GatherND with [S, 1]
/// indices), or null.
Value selectedExperts(Value sel) {
  Operation *def = sel.getDefiningOp();
  if (!def || def->getNumOperands() != 2)
    return {};
  Value table = def->getOperand(0), ids = def->getOperand(1);
  auto it = staticType(ids);
  if (isa<GatherOp>(def)) {
    auto axis = def->getAttrOfType<IntegerAttr>("axis");
    if ((axis && axis.getInt() != 0) || !it || it.getRank() != 1)
      return {};
  } else if (auto onnx = dyn_cast<OnnxOp>(def);
             onnx && onnx.getOpType() == "GatherND") {
    auto batch = def->getAttrOfType<IntegerAttr>("batch_dims");
    if ((batch && batch.getInt() != 0) || !it || it.getRank() != 2 ||
        it.getDimSize(1) != 1)
      return {};
  } else {
    return {};
  }
  if (auto cast = table.getDefiningOp<CastOp>())
    table = cast->getOperand(0);
  auto wt = staticType(table), st = staticType(sel);
  if (!table.getDefiningOp<WeightOp>() || !wt || !st || wt.getRank() != 3 ||
      st.getRank() != 3 || wt.getDimSize(0) < 2 ||
      st.getDimSize(0) != it.getDimSize(0) ||
      st.getShape().drop_front() != wt.getShape().drop_front() ||
      !fromTopKIndices(ids))
    return {};
  return def->getOperand(0);
}

/// Rewrites one per-token expert product `mm` into the dispatched form.
LogicalResult formExperts(MatMulOp mm) {
  Operation *op = mm;
  Value sel = op->getOperand(0), x = op->getOperand(1);
  Value table = selectedExperts(sel);
  bool weightsFirst = bool(table);
  if (!table) {
    std::swap(sel, x);
    table = selectedExperts(sel);
  }
  auto xt = staticType(x), st = staticType(sel),
       ot = staticType(op->getResult(0));
  if (!table || !xt || !ot || xt.getRank() != 3 || !isActivation(x))
    return failure();
  int64_t S = st.getDimSize(0), p = st.getDimSize(1), q = st.getDimSize(2);
  // [S, p, q] x [S, q, 1] (the weights first), or [S, 1, p] x [S, p, q].
  SmallVector<int64_t> xShape = weightsFirst ? SmallVector<int64_t>{S, q, 1}
                                             : SmallVector<int64_t>{S, 1, p};
  SmallVector<int64_t> oShape = weightsFirst ? SmallVector<int64_t>{S, p, 1}
                                             : SmallVector<int64_t>{S, 1, q};
  if (xt.getShape() != ArrayRef<int64_t>(xShape) ||
      ot.getShape() != ArrayRef<int64_t>(oShape))
    return failure();
  int64_t K = weightsFirst ? q : p, N = weightsFirst ? p : q;
  int64_t E = cast<RankedTensorType>(table.getType()).getDimSize(0);
  int64_t C = (S + E - 1) / E;
  bool even = E * C == S;
  TensorBuilder b{OpBuilder(op), op->getLoc()};
  Value rows = b.reshape(x, {S, K});
  Value tokens = even ? b.reshape(rows, {E, C, K}) : b.gatherRows(rows, {E, C});
  Value experts = weightsFirst ? b.transpose(table, {0, 2, 1}) : table;
  auto yt = RankedTensorType::get({E, C, N}, ot.getElementType());
  Value y =
      MatMulOp::create(b.b, b.loc, TypeRange{yt}, ValueRange{tokens, experts},
                       ArrayRef<NamedAttribute>{})
          ->getResult(0);
  Value flat =
      even ? b.reshape(y, {S, N}) : b.gatherRows(b.reshape(y, {E * C, N}), {S});
  op->getResult(0).replaceAllUsesWith(b.reshape(flat, oShape));
  Operation *selection = sel.getDefiningOp();
  op->erase();
  if (selection->use_empty())
    selection->erase();
  return success();
}

struct FormExpertsPass
    : public orrery::impl::FormExpertsPassBase<FormExpertsPass> {
  void runOnOperation() override {
    SmallVector<MatMulOp> products;
    getOperation().walk([&](MatMulOp op) { products.push_back(op); });
    for (MatMulOp op : products)
      (void)formExperts(op);
    formExpertLoops(getOperation());
  }
};

} // namespace
