//===- ExpertLoop.cpp - transformers' per-expert loop as one expert layer -===//
//
// transformers' eager MoE blocks (Mixtral, Qwen2/Qwen3-MoE, DeepSeek-V3 and
// others before its experts backends) loop over the experts:
//
//   mask = one_hot(top_k_index, E).permute(2, 1, 0)
//   for e in range(E):
//     k, rows = torch.where(mask[e])                     # NonZero
//     y = experts[e](x[rows]) * top_k_weights[rows, k, None]
//     out.index_add_(0, rows, y)                         # a scatter
//
// A trace unrolls the loop into E copies of the same ops, each on its own
// expert's weights and with a row count that is data (the loader sizes it
// as balanced routing would: ValueDesc::oneHotDensity). The rewrite runs
// the first copy over all experts at once: each of its values gains a
// leading expert dim, the experts' weights are stacked into one [E, ...]
// weight, and the E scatters become the generator's combine (each token's
// k rows summed). The layer then prices as the generator's MoE: expert
// GEMMs [E, C, K] x [E, K, N] that expert parallelism splits.
//
//===----------------------------------------------------------------------===//
#include "ExpertLoop.h"
#include "TensorBuilder.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace orrery;

namespace {

/// The most ops one expert's iteration may hold (an iteration that grows
/// past it has reached the rest of the model: not a loop body).
constexpr size_t kMaxIterationOps = 256;

bool isOnnx(Operation *op, StringRef type) {
  auto onnx = dyn_cast_or_null<OnnxOp>(op);
  return onnx && onnx.getOpType() == type;
}

bool isScatter(Operation *op) {
  return isOnnx(op, "ScatterElements") || isOnnx(op, "ScatterND");
}

/// The OneHot whose mask `v` views (through casts, transposes, gathers).
Operation *maskSource(Value v) {
  for (int depth = 0; depth < 8; ++depth) {
    Operation *def = v.getDefiningOp();
    if (isOnnx(def, "OneHot"))
      return def;
    if (!def || !isa<CastOp, TransposeOp, GatherOp, ReshapeOp, SqueezeOp,
                     UnsqueezeOp, SliceOp, IdentityOp>(def))
      return nullptr;
    v = def->getOperand(0);
  }
  return nullptr;
}

bool isElementwise(Operation *op) {
  return isa<AbsOp, NegOp, ReluOp, LeakyReluOp, EluOp, SeluOp, SigmoidOp,
             HardSigmoidOp, HardSwishOp, TanhOp, ErfOp, GeluOp, SoftplusOp,
             ExpOp, LogOp, SqrtOp, ReciprocalOp, FloorOp, CeilOp, RoundOp,
             SignOp, NotOp, IdentityOp, CastOp, AddOp, SubOp, MulOp, DivOp,
             PowOp, MaxOp, MinOp, ModOp, EqualOp, LessOp, LessOrEqualOp,
             GreaterOp, GreaterOrEqualOp, AndOp, OrOp, XorOp, WhereOp, ClipOp>(
      op);
}

/// Whether `a` and `b` compute the same thing: one value, or alike ops
/// (not weights) on values that are the same in turn. Each iteration
/// recomputes what it shares with the others (the unsqueezed hidden
/// states, the flattened routing weights).
bool sameValue(Value a, Value b, int depth = 6) {
  if (a == b)
    return true;
  Operation *x = a.getDefiningOp(), *y = b.getDefiningOp();
  if (!x || !y || depth == 0 || x->getName() != y->getName() ||
      isa<WeightOp>(x) || x->getNumRegions() ||
      x->getAttrDictionary() != y->getAttrDictionary() ||
      a.getType() != b.getType() ||
      cast<OpResult>(a).getResultNumber() !=
          cast<OpResult>(b).getResultNumber() ||
      x->getNumOperands() != y->getNumOperands())
    return false;
  for (auto [p, q] : llvm::zip(x->getOperands(), y->getOperands()))
    if (!sameValue(p, q, depth - 1))
      return false;
  return true;
}

/// The weight an iteration reads as its expert's, through a transpose:
/// a weight of its own (Mixtral's experts.e.w1 in transformers 4.x), or
/// one expert's slice of a stacked [E, ...] weight (`gate_up_proj[e]`).
struct ExpertWeight {
  WeightOp weight;
  TransposeOp transposed;
  bool slice = false;
};

ExpertWeight expertWeight(Value v) {
  ExpertWeight w;
  w.transposed = v.getDefiningOp<TransposeOp>();
  if (w.transposed)
    v = w.transposed->getOperand(0);
  if (auto g = v.getDefiningOp<GatherOp>()) {
    auto axis = g->getAttrOfType<IntegerAttr>("axis");
    auto ids = dyn_cast<RankedTensorType>(g->getOperand(1).getType());
    if ((axis && axis.getInt() != 0) || !ids || !ids.hasStaticShape() ||
        ids.getNumElements() != 1 || ids.getRank() > 1)
      return {};
    w.slice = true;
    v = g->getOperand(0);
    if (ids.getRank() == 1) // [1] ids keep the expert dim: [1, ...]
      return {};
  }
  w.weight = v.getDefiningOp<WeightOp>();
  return w;
}

/// One expert's copy of the loop body.
struct Iteration {
  Operation *positions = nullptr; ///< NonZero of the expert's mask
  SmallVector<Operation *> ops;   ///< what follows from it, in order
  llvm::DenseMap<Operation *, unsigned> index;
  Operation *combine = nullptr; ///< the scatter into the output

  /// The ops that follow from `positions` up to its scatter; false when
  /// they reach anything else.
  bool collect() {
    llvm::SetVector<Operation *> seen;
    SmallVector<Operation *> work{positions};
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      for (Operation *user : op->getUsers()) {
        if (isScatter(user)) {
          if (combine && combine != user)
            return false;
          combine = user;
          continue;
        }
        if (user->getBlock() != positions->getBlock() ||
            user->hasTrait<OpTrait::IsTerminator>() || user->getNumRegions())
          return false;
        if (seen.insert(user)) {
          if (seen.size() > kMaxIterationOps)
            return false;
          work.push_back(user);
        }
      }
    }
    ops.assign(seen.begin(), seen.end());
    llvm::sort(
        ops, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    for (auto [i, op] : llvm::enumerate(ops))
      index[op] = unsigned(i);
    return combine && combine->getNumOperands() == 3;
  }

  /// Where operand `v` comes from: this iteration's op `op` (result
  /// `result`), its NonZero (op = -1), or outside (op = -2).
  std::pair<int, unsigned> source(Value v) const {
    Operation *def = v.getDefiningOp();
    if (def && def == positions)
      return {-1, 0};
    auto found = def ? index.find(def) : index.end();
    if (found == index.end())
      return {-2, 0};
    return {int(found->second), cast<OpResult>(v).getResultNumber()};
  }
};

using OperandSlot = std::pair<unsigned, unsigned>; ///< (op, operand)

/// The E iterations of one loop, checked alike op for op; the outside
/// operands that differ (each iteration's own expert weight) in `stacked`.
bool alike(ArrayRef<Iteration> its, llvm::DenseSet<OperandSlot> &stacked) {
  const Iteration &first = its.front();
  for (const Iteration &it : its.drop_front()) {
    if (it.ops.size() != first.ops.size() ||
        it.combine->getName() != first.combine->getName() ||
        it.combine->getAttrDictionary() != first.combine->getAttrDictionary())
      return false;
    for (unsigned i = 0; i <= first.ops.size(); ++i) {
      // The scatters last: their indices and rows (not the sum so far).
      bool last = i == first.ops.size();
      Operation *a = last ? first.combine : first.ops[i];
      Operation *b = last ? it.combine : it.ops[i];
      if (a->getName() != b->getName() ||
          a->getAttrDictionary() != b->getAttrDictionary() ||
          !llvm::equal(a->getResultTypes(), b->getResultTypes()) ||
          a->getNumOperands() != b->getNumOperands())
        return false;
      for (unsigned k = last ? 1 : 0; k < a->getNumOperands(); ++k) {
        Value x = a->getOperand(k), y = b->getOperand(k);
        auto sx = first.source(x), sy = it.source(y);
        if (sx != sy)
          return false;
        if (sx.first != -2 || sameValue(x, y))
          continue;
        ExpertWeight wx = expertWeight(x), wy = expertWeight(y);
        TransposeOp tx = wx.transposed, ty = wy.transposed;
        if (last || !wx.weight || !wy.weight || wx.slice != wy.slice ||
            (wx.weight == wy.weight) != wx.slice ||
            x.getType() != y.getType() ||
            wx.weight.getType() != wy.weight.getType() ||
            bool(tx) != bool(ty) ||
            (tx && tx->getAttrDictionary() != ty->getAttrDictionary()) ||
            (wx.slice &&
             cast<RankedTensorType>(wx.weight.getType()).getDimSize(0) !=
                 int64_t(its.size())))
          return false;
        stacked.insert({i, k});
      }
    }
  }
  return true;
}

/// The op that holds the sum of the scatters after the last expert: of the
/// adds and scatters downstream of them that add nothing else (a shared
/// expert's output is added after it), the one used elsewhere.
Operation *accumulated(ArrayRef<Iteration> its,
                       llvm::SetVector<Operation *> &acc) {
  SmallVector<Operation *> work;
  for (const Iteration &it : its)
    if (acc.insert(it.combine))
      work.push_back(it.combine);
  auto addsOnlySums = [&](Operation *op) {
    return llvm::all_of(op->getOperands(), [&](Value v) {
      return !isActivation(v) || acc.contains(v.getDefiningOp());
    });
  };
  while (!work.empty())
    for (Operation *user : work.pop_back_val()->getUsers())
      if (isa<AddOp>(user) && addsOnlySums(user) && acc.insert(user))
        work.push_back(user);
  Operation *result = nullptr;
  for (Operation *op : acc)
    for (Operation *user : op->getUsers())
      if (!acc.contains(user)) {
        if (result && result != op)
          return nullptr;
        result = op;
      }
  return result;
}

/// Writes the first iteration over all E experts.
struct Batcher {
  ArrayRef<Iteration> its;
  const llvm::DenseSet<OperandSlot> &stacked;
  TensorBuilder tb;
  int64_t E;
  llvm::DenseMap<Value, Value> batched;

  Batcher(ArrayRef<Iteration> its, const llvm::DenseSet<OperandSlot> &stacked,
          TensorBuilder tb, int64_t E)
      : its(its), stacked(stacked), tb(tb), E(E) {}
  llvm::DenseMap<Operation *, Value> stacks; ///< first expert's weight -> stack

  RankedTensorType withExperts(Type t) const {
    auto r = dyn_cast<RankedTensorType>(t);
    if (!r || !r.hasStaticShape())
      return nullptr;
    SmallVector<int64_t> shape{E};
    shape.append(r.getShape().begin(), r.getShape().end());
    return RankedTensorType::get(shape, r.getElementType());
  }

  /// The experts' weights at slot (i, k) as one [E, ...] weight, read as
  /// the iterations read theirs.
  Value stack(unsigned i, unsigned k) {
    SmallVector<WeightOp> ws;
    ExpertWeight first = expertWeight(its.front().ops[i]->getOperand(k));
    TransposeOp t = first.transposed;
    for (const Iteration &it : its)
      ws.push_back(expertWeight(it.ops[i]->getOperand(k)).weight);
    Value &w = stacks[ws.front()];
    if (!w)
      w = first.slice ? Value(first.weight) : stackedWeight(ws);
    if (!t)
      return w;
    return tb.transpose(w, permAfter(t));
  }

  /// One weight for `ws`, named after the first and last with the part
  /// that differs as a range: "experts.{0..7}.w1.weight".
  Value stackedWeight(MutableArrayRef<WeightOp> ws) {
    StringRef first = ws.front().getName(), last = ws.back().getName();
    size_t pre = 0, post = 0, n = std::min(first.size(), last.size());
    while (pre < n && first[pre] == last[pre])
      ++pre;
    while (post + pre < n &&
           first[first.size() - 1 - post] == last[last.size() - 1 - post])
      ++post;
    // Whole numbers in the range: "experts.{10..17}", not "experts.1{0..7}"
    // (names stay unique however the exporter numbers them).
    while (pre > 0 && llvm::isDigit(first[pre - 1]))
      --pre;
    while (post > 0 && llvm::isDigit(first[first.size() - post]))
      --post;
    std::string name =
        (first.take_front(pre) + "{" + first.slice(pre, first.size() - post) +
         ".." + last.slice(pre, last.size() - post) + "}" +
         first.take_back(post))
            .str();
    bool trainable =
        llvm::all_of(ws, [](WeightOp w) { return w.getTrainable(); });
    return WeightOp::create(tb.b, tb.loc, withExperts(ws.front().getType()),
                            name, trainable);
  }

  Value operand(unsigned i, unsigned k) {
    Value v = its.front().ops[i]->getOperand(k);
    auto [op, result] = its.front().source(v);
    if (op == -1) {
      RankedTensorType t = withExperts(v.getType());
      return t ? tb.zeros(t.getShape()) : Value();
    }
    if (op >= 0)
      return batched.lookup(v);
    return stacked.contains({i, k}) ? stack(i, k) : v;
  }

  /// A transpose's permutation with the expert dim first and kept.
  static SmallVector<int64_t> permAfter(TransposeOp t) {
    SmallVector<int64_t> perm{0};
    int64_t rank = cast<RankedTensorType>(t->getOperand(0).getType()).getRank();
    if (auto attr = t->getAttrOfType<DenseI64ArrayAttr>("perm"))
      for (int64_t p : attr.asArrayRef())
        perm.push_back(p + 1);
    else
      for (int64_t p = rank; p > 0; --p) // ONNX's default: the dims reversed
        perm.push_back(p);
    return perm;
  }

  /// An axis of the first iteration's value, in its batched value.
  static int64_t shifted(int64_t axis) { return axis < 0 ? axis : axis + 1; }

  Value axesAfter(Value axes, int64_t rank, size_t count) {
    SmallVector<int64_t> out;
    if (!axes) {
      for (size_t a = 0; a < count; ++a)
        out.push_back(int64_t(a) + 1);
      return tb.i64s(out);
    }
    auto c = axes.getDefiningOp<ConstantOp>();
    auto attr = c ? dyn_cast<DenseIntElementsAttr>(c.getValue()) : nullptr;
    if (!attr)
      return {};
    for (const APInt &a : attr.getValues<APInt>()) {
      int64_t x = a.getSExtValue();
      out.push_back(x < 0 ? x + rank + 1 : x + 1);
    }
    return tb.i64s(out);
  }

  /// Op i of the first iteration over all experts; false when its kind has
  /// no batched form here.
  bool batch(unsigned i) {
    Operation *op = its.front().ops[i];
    SmallVector<Value> operands;
    for (unsigned k = 0; k < op->getNumOperands(); ++k) {
      operands.push_back(operand(i, k));
      if (!operands.back())
        return false;
    }
    SmallVector<Type> types;
    for (Type t : op->getResultTypes()) {
      types.push_back(withExperts(t));
      if (!types.back())
        return false;
    }
    if (types.empty())
      return false;
    auto out = cast<RankedTensorType>(types.front());
    SmallVector<NamedAttribute> attrs(op->getAttrs());
    auto setAttr = [&](StringRef name, Attribute value) {
      llvm::erase_if(attrs,
                     [&](NamedAttribute a) { return a.getName() == name; });
      attrs.push_back(tb.b.getNamedAttr(name, value));
    };
    auto in = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
    if (!in)
      return false;
    int64_t inRank = in.getRank();
    Operation *made = nullptr;
    if (isa<ReshapeOp, UnsqueezeOp, SqueezeOp, FlattenOp>(op)) {
      batched[op->getResult(0)] = tb.reshape(operands[0], out.getShape());
      return true;
    }
    if (isa<ExpandOp>(op)) {
      operands[1] = tb.i64s(out.getShape());
    } else if (auto t = dyn_cast<TransposeOp>(op)) {
      setAttr("perm", tb.b.getDenseI64ArrayAttr(permAfter(t)));
    } else if (isa<SplitOp, SoftmaxOp, LogSoftmaxOp, ConcatOp>(op)) {
      auto axis = op->getAttrOfType<IntegerAttr>("axis");
      int64_t a =
          axis ? axis.getInt() : (isa<SoftmaxOp, LogSoftmaxOp>(op) ? -1 : 0);
      setAttr("axis", tb.b.getI64IntegerAttr(shifted(a)));
    } else if (isa<SliceOp>(op)) {
      auto starts = dyn_cast<RankedTensorType>(op->getOperand(1).getType());
      if (!starts || !starts.hasStaticShape())
        return false;
      size_t count = starts.getNumElements();
      Value axes =
          axesAfter(op->getNumOperands() > 3 ? op->getOperand(3) : Value(),
                    inRank, count);
      if (!axes)
        return false;
      if (operands.size() > 3)
        operands[3] = axes;
      else
        operands.push_back(axes);
    } else if (isa<GatherOp>(op)) {
      return gather(op, operands, out);
    } else if (isa<MatMulOp>(op)) {
      alignRanks(operands);
    } else if (!isElementwise(op)) {
      return false;
    }
    made = tb.make(op, operands, types, attrs);
    for (auto [r, m] : llvm::zip(op->getResults(), made->getResults()))
      batched[r] = m;
    return true;
  }

  /// A stacked [E, K, N] weight against [E, .., n, K] rows: ones inserted
  /// after the expert dim.
  void alignRanks(SmallVector<Value> &operands) {
    int64_t rank = 0;
    for (Value v : operands)
      if (auto t = dyn_cast<RankedTensorType>(v.getType()))
        rank = std::max(rank, t.getRank());
    for (Value &v : operands) {
      auto t = dyn_cast<RankedTensorType>(v.getType());
      if (!t || !t.hasStaticShape() || t.getRank() == rank ||
          t.getDimSize(0) != E)
        continue;
      SmallVector<int64_t> shape{E};
      shape.append(size_t(rank - t.getRank()), 1);
      shape.append(t.getShape().begin() + 1, t.getShape().end());
      v = tb.reshape(v, shape);
    }
  }

  /// Gather with the expert dim on the data (an axis further in) or on the
  /// indices (the rows each expert takes: the expert dim lands at the
  /// axis, then moves to the front).
  bool gather(Operation *op, SmallVector<Value> &operands,
              RankedTensorType out) {
    auto axisAttr = op->getAttrOfType<IntegerAttr>("axis");
    int64_t rank =
        cast<RankedTensorType>(op->getOperand(0).getType()).getRank();
    int64_t axis = axisAttr ? axisAttr.getInt() : 0;
    if (axis < 0)
      axis += rank;
    if (axis < 0 || axis >= rank)
      return false;
    bool dataBatched = its.front().source(op->getOperand(0)).first != -2;
    bool idsBatched = its.front().source(op->getOperand(1)).first != -2;
    if (dataBatched == idsBatched)
      return false;
    auto attr = tb.b.getNamedAttr(
        "axis", tb.b.getI64IntegerAttr(dataBatched ? axis + 1 : axis));
    auto data = cast<RankedTensorType>(operands[0].getType());
    auto ids = cast<RankedTensorType>(operands[1].getType());
    SmallVector<int64_t> shape(data.getShape().begin(),
                               data.getShape().begin() +
                                   (dataBatched ? axis + 1 : axis));
    shape.append(ids.getShape().begin(), ids.getShape().end());
    shape.append(data.getShape().begin() + (dataBatched ? axis + 2 : axis + 1),
                 data.getShape().end());
    auto t = RankedTensorType::get(shape, out.getElementType());
    Value g = tb.make(op, operands, TypeRange{t}, {attr})->getResult(0);
    if (idsBatched && axis > 0) {
      SmallVector<int64_t> perm{axis};
      for (int64_t d = 0; d < t.getRank(); ++d)
        if (d != axis)
          perm.push_back(d);
      g = tb.transpose(g, perm);
    }
    if (g.getType() != out)
      return false;
    batched[op->getResult(0)] = g;
    return true;
  }
};

/// Rewrites the loop whose iterations are `its` (E of them, in order).
bool rewrite(MutableArrayRef<Iteration> its, Operation *oneHot) {
  llvm::DenseSet<OperandSlot> stacked;
  if (!alike(its, stacked))
    return false;
  llvm::SetVector<Operation *> acc;
  Operation *sum = accumulated(its, acc);
  auto st = sum && sum->getNumResults() == 1
                ? dyn_cast<RankedTensorType>(sum->getResult(0).getType())
                : nullptr;
  auto ids = dyn_cast<RankedTensorType>(oneHot->getOperand(0).getType());
  if (!st || !st.hasStaticShape() || st.getRank() != 2 || !ids ||
      !ids.hasStaticShape())
    return false;
  int64_t T = st.getDimSize(0), d = st.getDimSize(1);
  if (ids.getNumElements() % T)
    return false;
  int64_t k = ids.getNumElements() / T, E = int64_t(its.size());
  Batcher b(its, stacked, TensorBuilder{OpBuilder(sum), sum->getLoc()}, E);
  // What the rewrite builds lies between `before` and `sum`; what nothing
  // uses of it (all of it, when the rewrite gives up) is erased.
  Operation *before = sum->getPrevNode();
  auto eraseUnused = [&] {
    for (Operation *op = sum->getPrevNode(); op && op != before;) {
      Operation *prev = op->getPrevNode();
      if (op->use_empty())
        op->erase();
      op = prev;
    }
  };
  bool built = true;
  for (unsigned i = 0; built && i < its.front().ops.size(); ++i)
    built = b.batch(i);
  Value updates =
      built ? b.batched.lookup(its.front().combine->getOperand(2)) : Value();
  auto ut = updates ? cast<RankedTensorType>(updates.getType()) : nullptr;
  if (!ut || ut.getElementType() != st.getElementType() ||
      ut.getNumElements() % (E * d)) {
    eraseUnused();
    return false;
  }
  int64_t rows = ut.getNumElements() / d;
  TensorBuilder &tb = b.tb;
  Value flat = tb.reshape(updates, {rows, d});
  if (rows != T * k)
    flat = tb.gatherRows(flat, {T * k});
  Value perToken = tb.reshape(flat, {T, k, d});
  Value combined =
      ReduceSumOp::create(tb.b, tb.loc, TypeRange{st},
                          ValueRange{perToken, tb.i64s({1})},
                          ArrayRef<NamedAttribute>{tb.b.getNamedAttr(
                              "keepdims", tb.b.getI64IntegerAttr(0))})
          ->getResult(0);
  sum->getResult(0).replaceAllUsesWith(combined);
  eraseUnused();
  // The iterations, their scatters and sums, and what only they used.
  llvm::SetVector<Operation *> dead(acc.begin(), acc.end());
  for (Iteration &it : its) {
    dead.insert(it.ops.begin(), it.ops.end());
    dead.insert(it.positions);
  }
  for (size_t i = 0; i < dead.size(); ++i) {
    Operation *op = dead[i];
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp())
        dead.insert(def);
  }
  bool erased = true;
  llvm::DenseSet<Operation *> gone;
  while (erased) {
    erased = false;
    for (Operation *op : llvm::reverse(dead))
      if (!gone.count(op) && op->use_empty()) {
        gone.insert(op);
        op->erase();
        erased = true;
      }
  }
  return true;
}

} // namespace

void orrery::formExpertLoops(ModuleOp module) {
  module.walk([&](func::FuncOp fn) {
    // The NonZeros of each router's one-hot mask, in program order.
    llvm::MapVector<Operation *, SmallVector<Operation *>> loops;
    fn.walk([&](OnnxOp op) {
      if (op.getOpType() == "NonZero" && op->getNumOperands() == 1)
        if (Operation *mask = maskSource(op->getOperand(0)))
          loops[mask].push_back(op);
    });
    for (auto &[oneHot, positions] : loops) {
      auto mask = dyn_cast<RankedTensorType>(oneHot->getResult(0).getType());
      auto axis = oneHot->getAttrOfType<IntegerAttr>("axis");
      if (!mask || !mask.hasStaticShape())
        continue;
      int64_t a = axis ? axis.getInt() : -1;
      if (a < 0)
        a += mask.getRank();
      if (a < 0 || a >= mask.getRank() ||
          mask.getDimSize(a) != int64_t(positions.size()) ||
          positions.size() < 2)
        continue; // not every expert's iteration is in the graph
      SmallVector<Iteration> its(positions.size());
      bool ok = true;
      for (auto [it, p] : llvm::zip(its, positions)) {
        it.positions = p;
        ok = ok && it.collect();
      }
      if (ok)
        (void)rewrite(its, oneHot);
    }
  });
}
