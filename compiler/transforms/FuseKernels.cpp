//===- FuseKernels.cpp - the regions modern stacks run as one kernel ------===//
//
// An exporter writes attention as MatMul / Mul / Add / Softmax / Dropout /
// MatMul and RMSNorm as Pow / ReduceMean / Add / Sqrt / Div / Mul, but
// FlashAttention and Transformer Engine run each as one kernel whose
// intermediate tensors never reach memory. Each rewrite below finds one
// such region by its dataflow (not by names), checks that nothing outside
// uses a tensor inside it, and replaces it with the fused op:
//
//   %s = matmul(%q, %kt)            %o = fused_attention(%q, %k, %v)
//   %t = mul(%s, 0.125)       ==>        {causal, scale = 0.125, ...}
//   %m = add(%t, %triangle)
//   %p = softmax(%m)
//   %o = matmul(%p, %v)
//
//===----------------------------------------------------------------------===//
#include "orrery/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

#include <cmath>
#include <optional>

namespace orrery {
#define GEN_PASS_DEF_FUSEKERNELSPASS
#include "orrery/Transforms/Passes.h.inc"
} // namespace orrery

using namespace mlir;
using namespace orrery;

namespace {

/// Ops whose users a rewrite erased: erased in turn when nothing else uses
/// them.
using Dead = llvm::SetVector<Operation *>;

/// The ops a rewrite removes; valid only when none of their results is used
/// outside them (except by `root`, whose result the fused op takes over).
struct Region {
  llvm::SmallVector<Operation *> ops;
  llvm::DenseSet<Operation *> set;
  void add(Operation *op) {
    if (set.insert(op).second)
      ops.push_back(op);
  }
  /// Erases the region's ops (their results must be unused by then),
  /// noting the producers of their operands, which may now be dead.
  void erase(Dead &maybeDead) {
    for (Operation *op : llvm::reverse(ops)) {
      maybeDead.remove(op);
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp())
          if (!set.contains(def))
            maybeDead.insert(def);
      op->dropAllUses();
      op->erase();
    }
  }
  bool closed(Operation *root) const {
    for (Operation *op : ops)
      for (Operation *user : op->getUsers())
        if (op != root && user != root && !set.contains(user))
          return false;
    return true;
  }
};

RankedTensorType rankedOf(Value v) {
  return dyn_cast<RankedTensorType>(v.getType());
}

/// The value of a one-element constant.
std::optional<double> scalarConstant(Value v) {
  auto c = v.getDefiningOp<ConstantOp>();
  if (!c)
    return std::nullopt;
  auto attr = dyn_cast<DenseElementsAttr>(c.getValue());
  if (!attr || attr.getNumElements() != 1)
    return std::nullopt;
  Type t = attr.getElementType();
  if (isa<FloatType>(t))
    return (*attr.value_begin<APFloat>()).convertToDouble();
  if (t.isInteger(1))
    return std::nullopt;
  if (isa<IntegerType>(t))
    return double((*attr.value_begin<APInt>()).getSExtValue());
  return std::nullopt;
}

/// A constant's elements as doubles (integers and floats; booleans as 0
/// and 1); empty for anything else, and past 2^24 elements (a [4096, 4096]
/// mask is the largest read).
std::vector<double> constantValues(ConstantOp c) {
  std::vector<double> out;
  auto attr = dyn_cast<DenseElementsAttr>(c.getValue());
  if (!attr || attr.getNumElements() > (int64_t(1) << 24))
    return out;
  Type t = attr.getElementType();
  out.reserve(attr.getNumElements());
  if (t.isInteger(1)) {
    for (bool b : attr.getValues<bool>())
      out.push_back(b);
  } else if (isa<IntegerType>(t)) {
    for (const APInt &x : attr.getValues<APInt>())
      out.push_back(double(x.getSExtValue()));
  } else if (isa<FloatType>(t)) {
    for (const APFloat &x : attr.getValues<APFloat>())
      out.push_back(x.convertToDouble());
  }
  return out;
}

/// A constant mask over [.., q, k] (the importer folds one built from the
/// positions of a short bound sequence): 0 when it keeps exactly the causal
/// triangle, W when exactly a causal band of W keys (a sliding window),
/// none for anything else. `keep`: 1 where true keeps a score, 0 where
/// false does, -1 an additive mask (0 keeps, -1e4 or less masks).
std::optional<int64_t> constantBand(Value mask, int keep) {
  auto c = mask.getDefiningOp<ConstantOp>();
  auto t = rankedOf(mask);
  if (!c || !t || !t.hasStaticShape() || t.getRank() < 2)
    return std::nullopt;
  int64_t r = t.getRank(), sq = t.getDimSize(r - 2), sk = t.getDimSize(r - 1);
  if (sq < 2 || sk < sq || t.getNumElements() != sq * sk) // one [q, k] mask
    return std::nullopt;
  bool boolean = t.getElementType().isInteger(1);
  if (boolean != (keep >= 0))
    return std::nullopt;
  std::vector<double> x = constantValues(c);
  if (int64_t(x.size()) != sq * sk)
    return std::nullopt;
  auto kept = [&](int64_t i, int64_t j) {
    double v = x[size_t(i * sk + j)];
    return boolean ? (v != 0) == (keep == 1) : v == 0;
  };
  if (!boolean)
    for (double v : x)
      if (v != 0 && v > -1e4)
        return std::nullopt; // a bias, not a mask
  // Each query (the last sq positions) keeps a run of keys ending at its
  // own: all of them (causal) or the same W (a band).
  int64_t window = 0, widestFromStart = 0;
  for (int64_t i = 0; i < sq; ++i) {
    int64_t self = i + sk - sq, lo = self;
    if (!kept(i, self))
      return std::nullopt;
    for (int64_t j = self + 1; j < sk; ++j)
      if (kept(i, j))
        return std::nullopt;
    while (lo > 0 && kept(i, lo - 1))
      --lo;
    for (int64_t j = 0; j < lo; ++j)
      if (kept(i, j))
        return std::nullopt;
    int64_t width = self - lo + 1;
    if (lo == 0)
      widestFromStart = std::max(widestFromStart, width);
    else if (window == 0)
      window = width;
    else if (width != window)
      return std::nullopt;
  }
  if (window > 0 && widestFromStart > window)
    return std::nullopt;
  return window;
}

/// A one-element tensor that does not depend on the data (a scale, an
/// epsilon, a fill value).
bool isScalarNonActivation(Value v) {
  auto t = rankedOf(v);
  return t && t.hasStaticShape() && t.getNumElements() == 1 &&
         !isActivation(v);
}

/// Whether `v` is computed from a Range within `depth` ops (positions).
bool derivesFromRange(Value v, int depth) {
  Operation *def = v.getDefiningOp();
  if (!def)
    return false;
  if (isa<RangeOp>(def))
    return true;
  if (depth == 0)
    return false;
  return llvm::any_of(def->getOperands(), [&](Value o) {
    return derivesFromRange(o, depth - 1);
  });
}

/// A mask whose ancestry holds a triangle or a comparison of positions: a
/// causal mask, however the exporter built it (Trilu of a filled tensor,
/// HF's `arange <= arange[:, None]`, torch's SDPA `ones().tril()`).
bool looksCausal(Value v, int depth, llvm::DenseSet<Operation *> &seen) {
  Operation *def = v.getDefiningOp();
  if (!def || !seen.insert(def).second)
    return false;
  if (isa<TriluOp>(def))
    return true;
  // Positions compared: Range values, or the constants an exporter folded
  // them into (a row against a column of positions).
  if (isa<LessOp, LessOrEqualOp, GreaterOp, GreaterOrEqualOp>(def) &&
      llvm::all_of(def->getOperands(), [](Value o) {
        return derivesFromRange(o, 6) || !isActivation(o);
      }))
    return true;
  if (depth == 0)
    return false;
  return llvm::any_of(def->getOperands(), [&](Value o) {
    return looksCausal(o, depth - 1, seen);
  });
}

bool looksCausal(Value v) {
  llvm::DenseSet<Operation *> seen;
  return looksCausal(v, 16, seen);
}

/// Positions plus a constant: a Range, moved by Unsqueeze, Reshape,
/// Expand, Cast, and shifted by Add or Sub of a scalar constant; the shift,
/// or none when `v` is anything else.
std::optional<double> positionShift(Value v, int depth) {
  Operation *def = v.getDefiningOp();
  if (!def || depth < 0)
    return std::nullopt;
  if (isa<RangeOp>(def))
    return 0.0;
  if (auto c = dyn_cast<ConstantOp>(def)) {
    // Positions the importer folded (a Range of a bound length): x0 + i.
    std::vector<double> x = constantValues(c);
    if (x.size() < 2)
      return std::nullopt;
    for (size_t i = 1; i < x.size(); ++i)
      if (x[i] != x[0] + double(i))
        return std::nullopt;
    return x[0];
  }
  if (isa<UnsqueezeOp, ReshapeOp, ExpandOp, CastOp, IdentityOp>(def))
    return positionShift(def->getOperand(0), depth - 1);
  if (isa<AddOp, SubOp>(def) && def->getNumOperands() == 2) {
    bool sub = isa<SubOp>(def);
    for (int c = 1; c >= (sub ? 1 : 0); --c)
      if (std::optional<double> k = scalarConstant(def->getOperand(c)))
        if (std::optional<double> x =
                positionShift(def->getOperand(1 - c), depth - 1))
          return *x + (sub ? -*k : *k);
  }
  return std::nullopt;
}

/// Which positions an operand of a [.., q, k] mask comparison holds: the
/// queries' (a column: last axis 1), the keys' (a row), or neither.
enum class Axis { None, Query, Key };
Axis positionAxis(Value v) {
  auto t = rankedOf(v);
  if (!t || !t.hasStaticShape() || t.getRank() < 1)
    return Axis::None;
  int64_t r = t.getRank(), last = t.getDimSize(r - 1),
          before = r > 1 ? t.getDimSize(r - 2) : 1;
  if (last == 1 && before > 1)
    return Axis::Query;
  if (last > 1 && before == 1)
    return Axis::Key;
  return Axis::None;
}

/// A band's lower edge written as a comparison of positions (transformers'
/// sliding-window mask, `kv_idx > q_idx - W`, or `q_idx - kv_idx < W`):
/// the keys a query sees, itself included, or 0 when `def` is not one.
int64_t comparedWindow(Operation *def) {
  if (!isa<LessOp, LessOrEqualOp, GreaterOp, GreaterOrEqualOp>(def) ||
      def->getNumOperands() != 2)
    return 0;
  // As `lhs - rhs` against 0: key - query > d keeps keys past q + d.
  bool greater = isa<GreaterOp, GreaterOrEqualOp>(def),
       strict = isa<GreaterOp, LessOp>(def);
  Value lhs = def->getOperand(0), rhs = def->getOperand(1);
  std::optional<double> d; // key - query OP d, with OP > or >=
  std::optional<double> sl = positionShift(lhs, 8), sr = positionShift(rhs, 8);
  Axis al = positionAxis(lhs), ar = positionAxis(rhs);
  if (sl && sr && al != Axis::None && ar != Axis::None && al != ar) {
    // key + a OP query + b, or query + a OP key + b.
    double keyMinusQuery = al == Axis::Key ? *sr - *sl : *sl - *sr;
    bool keyLeft = al == Axis::Key;
    if (greater == keyLeft) // key - query > (or >=) the shift
      d = keyMinusQuery;
  } else {
    // (query - key) OP c, or c OP (query - key).
    bool diffLeft = !scalarConstant(lhs).has_value();
    Value diff = diffLeft ? lhs : rhs;
    std::optional<double> c = scalarConstant(diffLeft ? rhs : lhs);
    auto sub = diff.getDefiningOp<SubOp>();
    if (!c || !sub)
      return 0;
    Value a = sub->getOperand(0), b = sub->getOperand(1);
    std::optional<double> sa = positionShift(a, 8), sb = positionShift(b, 8);
    Axis aa = positionAxis(a), ab = positionAxis(b);
    if (!sa || !sb || aa == Axis::None || ab == Axis::None || aa == ab)
      return 0;
    // diff = (a + sa) - (b + sb) without the shifts: query - key or the
    // reverse; the comparison as `diff OP c` with OP < or <= keeps a band
    // below when diff is query - key.
    bool queryMinusKey = aa == Axis::Query;
    bool lessThan = diffLeft ? !greater : greater;
    double shift = *sa - *sb;
    if (queryMinusKey && lessThan) // q - k + shift < c: k - q > shift - c
      d = shift - *c;
    else if (!queryMinusKey && !lessThan) // k - q + shift > c
      d = *c - shift;
  }
  if (!d || *d >= 0 || *d < -(1 << 30))
    return 0;
  // key - query > d: keys q + d + 1 .. q, -d of them; >= d: one more.
  return int64_t(-*d) + (strict ? 0 : 1);
}

/// A sliding window in a causal mask's ancestry: the band below it masked
/// by a lower triangle from diagonal -W (torch.tril(full, -W), a Trilu with
/// upper = 0 and k = -W), or kept by a comparison of positions
/// (comparedWindow): each query sees itself and the W - 1 keys before it.
/// 0 when there is none.
int64_t bandWindow(Value v, int depth, llvm::DenseSet<Operation *> &seen) {
  Operation *def = v.getDefiningOp();
  if (!def || !seen.insert(def).second)
    return 0;
  if (auto t = dyn_cast<TriluOp>(def)) {
    auto upper = t->getAttrOfType<IntegerAttr>("upper");
    std::optional<double> k = def->getNumOperands() > 1
                                  ? scalarConstant(def->getOperand(1))
                                  : std::nullopt;
    if (upper && upper.getInt() == 0 && k && *k < 0 && *k > -(1 << 30))
      return int64_t(-*k);
  }
  if (int64_t w = comparedWindow(def))
    return w;
  if (depth == 0)
    return 0;
  for (Value o : def->getOperands())
    if (int64_t w = bandWindow(o, depth - 1, seen))
      return w;
  return 0;
}

/// A product of two activations whose result ends in a [q, k] block: the
/// attention scores.
bool isActivationProduct(Operation *op) {
  return isa<MatMulOp>(op) && op->getNumOperands() == 2 &&
         isActivation(op->getOperand(0)) && isActivation(op->getOperand(1));
}

/// Whether `v` reaches a product of activations through the scaling,
/// masking and casting ops that sit between scores and softmax.
bool reachesScores(Value v, int depth) {
  Operation *def = v.getDefiningOp();
  if (!def)
    return false;
  if (isActivationProduct(def))
    return true;
  if (depth == 0 || !isa<MulOp, DivOp, AddOp, SubOp, WhereOp, CastOp,
                         IdentityOp>(def))
    return false;
  return llvm::any_of(def->getOperands(), [&](Value o) {
    return reachesScores(o, depth - 1);
  });
}

/// A Transpose that swaps the last two axes and keeps the others.
bool swapsLastTwo(TransposeOp t) {
  auto perm = t->getAttrOfType<DenseI64ArrayAttr>("perm");
  int64_t r = rankedOf(t->getOperand(0)) ? rankedOf(t->getOperand(0)).getRank()
                                         : 0;
  if (!perm || int64_t(perm.size()) != r || r < 2)
    return false;
  for (int64_t i = 0; i < r - 2; ++i)
    if (perm[i] != i)
      return false;
  return perm[r - 2] == r - 1 && perm[r - 1] == r - 2;
}

/// Before grouped-query attention repeats each key-value head (Reshape /
/// Unsqueeze / Expand / Tile), the tensor with `kvHeads` heads: the value
/// of the same rank whose trailing two dims and leading dim match and whose
/// head dim divides `heads`. `v` itself when there is no repeat.
Value beforeRepeat(Value v, int64_t heads) {
  auto t = rankedOf(v);
  if (!t || t.getRank() < 3)
    return v;
  int64_t r = t.getRank();
  Value cur = v;
  bool repeated = false;
  for (int steps = 0; steps < 6; ++steps) {
    Operation *def = cur.getDefiningOp();
    if (!def || !isa<ReshapeOp, UnsqueezeOp, ExpandOp, TileOp, SqueezeOp>(def))
      break;
    repeated |= isa<ExpandOp, TileOp>(def);
    cur = def->getOperand(0);
    auto ct = rankedOf(cur);
    if (repeated && ct && ct.getRank() == r &&
        ct.getShape().take_back(2) == t.getShape().take_back(2) &&
        ct.getDimSize(0) == t.getDimSize(0) && ct.getDimSize(r - 3) > 0 &&
        heads % ct.getDimSize(r - 3) == 0 &&
        ct.getDimSize(r - 3) < t.getDimSize(r - 3))
      return cur;
  }
  return v;
}

/// K when `kt` is Kᵀ written with its leading dims flattened, as torch's
/// dynamo exporter decomposes SDPA: reshape [b, h, sk, d] to [b·h, sk, d],
/// transpose the last two, reshape to [b, h, d, sk]. The three ops join
/// `region`; null when `kt` is not that.
Value flattenedTranspose(Value kt, int64_t sk, int64_t d, Region &region) {
  auto outer = kt.getDefiningOp<ReshapeOp>();
  auto t = outer ? outer->getOperand(0).getDefiningOp<TransposeOp>() : nullptr;
  auto inner = t ? t->getOperand(0).getDefiningOp<ReshapeOp>() : nullptr;
  if (!inner || !swapsLastTwo(t) || !outer->hasOneUse() || !t->hasOneUse() ||
      !inner->hasOneUse())
    return {};
  Value k = inner->getOperand(0);
  auto kType = rankedOf(k), ktType = rankedOf(kt);
  int64_t r = ktType ? ktType.getRank() : 0;
  if (!kType || kType.getRank() != r || r < 3 ||
      kType.getShape().drop_back(2) != ktType.getShape().drop_back(2) ||
      kType.getDimSize(r - 2) != sk || kType.getDimSize(r - 1) != d)
    return {};
  region.add(outer);
  region.add(t);
  region.add(inner);
  return k;
}

/// A two-operand Mul or Div of data by a one-element non-data tensor (x·c,
/// c·x, x/c): folds c into `scale` (`known` false when c is not a
/// constant) and returns the data operand's index; -1 for anything else.
int foldScale(Operation *def, double &scale, bool &known) {
  if (!isa<MulOp, DivOp>(def) || def->getNumOperands() != 2)
    return -1;
  int data = isScalarNonActivation(def->getOperand(1))   ? 0
             : isScalarNonActivation(def->getOperand(0)) ? 1
                                                         : -1;
  if (data < 0 || (isa<DivOp>(def) && data != 0))
    return -1;
  std::optional<double> c = scalarConstant(def->getOperand(1 - data));
  if (c && *c != 0)
    scale = isa<DivOp>(def) ? scale / *c : scale * *c;
  else
    known = false;
  return data;
}

/// Follows `cur` back through Mul / Div by one-element non-data tensors
/// used only inside the region, folding constants into `scale`.
Value absorbScales(Value cur, Region &region, Operation *user, double &scale,
                   bool &known) {
  while (Operation *def = cur.getDefiningOp()) {
    if (!isa<MulOp, DivOp>(def) || def->getNumOperands() != 2 ||
        !def->hasOneUse() || *def->getUsers().begin() != user)
      break;
    int data = foldScale(def, scale, known);
    if (data < 0)
      break;
    region.add(def);
    user = def;
    cur = def->getOperand(data);
  }
  return cur;
}

/// Dropout's probability of dropping (opset 12+: an input; earlier: the
/// `ratio` attribute; default 0.5), 0 when training_mode is a false constant.
double dropoutRatio(DropoutOp op) {
  if (op->getNumOperands() > 2)
    if (std::optional<double> mode = scalarConstant(op->getOperand(2)))
      if (*mode == 0)
        return 0;
  if (op->getNumOperands() > 1)
    if (std::optional<double> r = scalarConstant(op->getOperand(1)))
      return *r;
  if (auto r = op->getAttrOfType<FloatAttr>("ratio"))
    return r.getValueAsDouble();
  return 0.5;
}

/// The weighted product `v` is a view, slice or cast of (a projection's
/// heads: Reshape, Transpose, Slice, Split, a bias Add), or null.
Operation *projectionOf(Value v) {
  for (int steps = 0; steps < 8; ++steps) {
    Operation *def = v.getDefiningOp();
    if (!def)
      return nullptr;
    if (isa<MatMulOp, GemmOp>(def))
      return llvm::any_of(def->getOperands(),
                          [](Value o) { return !isActivation(o); })
                 ? def
                 : nullptr;
    if (isa<AddOp>(def) && def->getNumOperands() == 2 &&
        !isActivation(def->getOperand(1))) {
      v = def->getOperand(0);
      continue;
    }
    if (!isa<ReshapeOp, TransposeOp, SliceOp, SplitOp, CastOp, IdentityOp,
             SqueezeOp, UnsqueezeOp>(def))
      return nullptr;
    v = def->getOperand(0);
  }
  return nullptr;
}

/// `v` broadcast to every head from one (an Expand or Tile, through views).
bool broadcastOverHeads(Value v) {
  for (int steps = 0; steps < 4; ++steps) {
    Operation *def = v.getDefiningOp();
    if (!def)
      return false;
    if (isa<ExpandOp, TileOp>(def))
      return true;
    if (!isa<ReshapeOp, TransposeOp, CastOp, IdentityOp>(def))
      return false;
    v = def->getOperand(0);
  }
  return false;
}

/// The last axis of a Concat of two operands, or null.
ConcatOp lastAxisConcat(Value v) {
  auto cat = v.getDefiningOp<ConcatOp>();
  auto t = rankedOf(v);
  if (!cat || !t || cat->getNumOperands() != 2)
    return nullptr;
  auto axis = cat->getAttrOfType<IntegerAttr>("axis");
  if (!axis || (axis.getInt() != -1 && axis.getInt() != t.getRank() - 1))
    return nullptr;
  return cat;
}

/// A Slice keeping the first n - 1 of the n columns of the last axis of a
/// Softmax's output: the sink column of attention sinks dropped.
bool sinkColumnDropped(Operation *def) {
  if (!isa<SliceOp>(def) || def->getNumOperands() < 3)
    return false;
  auto in = rankedOf(def->getOperand(0)), out = rankedOf(def->getResult(0));
  if (!in || !out || !isa_and_nonnull<SoftmaxOp>(
                         def->getOperand(0).getDefiningOp()))
    return false;
  int64_t r = in.getRank();
  for (int64_t i = 0; i < r - 1; ++i)
    if (in.getDimSize(i) != out.getDimSize(i))
      return false;
  std::optional<double> start = scalarConstant(def->getOperand(1));
  return start && *start == 0 && in.getDimSize(r - 1) > 1 &&
         out.getDimSize(r - 1) == in.getDimSize(r - 1) - 1;
}

/// Multi-head latent attention (DeepSeek-V2/V3, as transformers and
/// Megatron write it): V and K's non-rotary part sliced from one
/// projection, not Q's, of a per-token latent narrower than half the keys'
/// and values' widths; K's other part a rotary one broadcast to every head.
/// Sets the shape's latent and rope dims; leaves them 0 otherwise.
void latentAttention(Value q, Value k, Value v, AttentionShape &s) {
  Operation *proj = projectionOf(v);
  if (!proj || !k)
    return;
  int64_t rope = 0;
  if (projectionOf(k) != proj) {
    ConcatOp cat = lastAxisConcat(k);
    if (!cat)
      return;
    Value own = cat->getOperand(0), shared = cat->getOperand(1);
    if (projectionOf(own) != proj || !broadcastOverHeads(shared))
      return;
    rope = rankedOf(shared).getDimSize(rankedOf(shared).getRank() - 1);
  }
  // Q from a projection of its own (a fused QKV is not a latent).
  ConcatOp qcat = lastAxisConcat(q);
  if (projectionOf(q) == proj ||
      (qcat && projectionOf(qcat->getOperand(0)) == proj))
    return;
  Value latent;
  for (Value o : proj->getOperands())
    if (isActivation(o))
      latent = o;
  auto lt = latent ? rankedOf(latent) : nullptr;
  if (!lt || !lt.hasStaticShape())
    return;
  int64_t width = lt.getDimSize(lt.getRank() - 1);
  if (2 * width >= s.kvHeads * (s.headDim - rope + s.valueDim) ||
      rope >= s.headDim)
    return;
  s.latentDim = width;
  s.ropeDim = rope;
}

LogicalResult fuseAttention(MatMulOp pv,
                        Dead &maybeDead) {
  Value p = pv->getOperand(0), v = pv->getOperand(1);
  auto pt = rankedOf(p), vt = rankedOf(v), ot = rankedOf(pv->getResult(0));
  if (!pt || !vt || !ot || pt.getRank() < 3 || vt.getRank() != pt.getRank() ||
      !isActivation(p) || !isActivation(v))
    return failure();
  Region region;
  double dropout = 0;
  // 1. The probabilities back to the softmax (or, attention sinks, to the
  // slice that drops the sink column from it).
  Value cur = p;
  Operation *softmax = nullptr;
  bool sinks = false;
  while (!softmax) {
    Operation *def = cur.getDefiningOp();
    if (!def)
      return failure();
    if (!sinks && sinkColumnDropped(def)) {
      sinks = true;
      cur = def->getOperand(0);
    } else if (auto sm = dyn_cast<SoftmaxOp>(def)) {
      int64_t axis = 1, r = rankedOf(sm->getResult(0)).getRank();
      if (auto a = sm->getAttrOfType<IntegerAttr>("axis"))
        axis = a.getInt();
      else
        axis = -1; // opset 13's default; older opsets flatten from axis 1
      if (axis != -1 && axis != r - 1)
        return failure();
      softmax = def;
    } else if (isa<CastOp, IdentityOp>(def)) {
      cur = def->getOperand(0);
    } else if (auto d = dyn_cast<DropoutOp>(def)) {
      dropout = 1 - (1 - dropout) * (1 - dropoutRatio(d));
      cur = def->getOperand(0);
    } else if (isa<WhereOp>(def)) {
      // torch's SDPA export guards fully masked rows: Where(IsNaN(x), 0, x).
      auto guard = dyn_cast_or_null<OnnxOp>(def->getOperand(0).getDefiningOp());
      if (!guard || guard.getOpType() != "IsNaN" ||
          guard->getNumOperands() != 1)
        return failure();
      Value data = guard->getOperand(0);
      if (def->getOperand(2) != data && def->getOperand(1) != data)
        return failure();
      region.add(guard);
      cur = data;
    } else {
      return failure();
    }
    region.add(def);
  }
  // 2. The scores back to the product of Q and Kᵀ: scales, masks, casts.
  double scale = 1;
  bool scaleKnown = true, causal = false;
  int64_t window = 0;
  Value bias;
  // `keep`: constantBand's, how the mask's values keep a score.
  auto takeMask = [&](Value mask, int keep) {
    if (std::optional<int64_t> band = constantBand(mask, keep)) {
      causal = true;
      window = std::max(window, *band);
      return true;
    }
    bool triangle = looksCausal(mask);
    causal |= triangle;
    if (triangle) {
      llvm::DenseSet<Operation *> seen;
      window = std::max(window, bandWindow(mask, 16, seen));
    }
    if (!triangle || isActivation(mask)) {
      if (bias)
        return false; // one bias operand at most
      bias = mask;
    }
    return true;
  };
  cur = softmax->getOperand(0);
  // The row maximum subtracted first (GPT-OSS writes the stable softmax
  // out): what the kernel does anyway.
  if (auto sub = cur.getDefiningOp<SubOp>()) {
    auto max = sub->getOperand(1).getDefiningOp<ReduceMaxOp>();
    if (max && max->getOperand(0) == sub->getOperand(0) && sub->hasOneUse()) {
      region.add(sub);
      region.add(max);
      cur = sub->getOperand(0);
    }
  }
  if (sinks) {
    // The sink logits joined as one more column of every row.
    ConcatOp cat = lastAxisConcat(cur);
    auto sink = cat ? rankedOf(cat->getOperand(1)) : nullptr;
    if (!cat || !sink || isActivation(cat->getOperand(1)) ||
        sink.getDimSize(sink.getRank() - 1) != 1)
      return failure();
    region.add(cat);
    cur = cat->getOperand(0);
  }
  MatMulOp qk;
  while (!qk) {
    Operation *def = cur.getDefiningOp();
    if (!def)
      return failure();
    if (isActivationProduct(def)) {
      qk = cast<MatMulOp>(def);
      break;
    }
    if (isa<CastOp, IdentityOp>(def)) {
      cur = def->getOperand(0);
    } else if (isa<MulOp, DivOp>(def) && def->getNumOperands() == 2) {
      int data = foldScale(def, scale, scaleKnown);
      if (data < 0)
        return failure();
      cur = def->getOperand(data);
    } else if (isa<AddOp>(def) && def->getNumOperands() == 2) {
      int data = reachesScores(def->getOperand(0), 6)   ? 0
                 : reachesScores(def->getOperand(1), 6) ? 1
                                                        : -1;
      if (data < 0 || !takeMask(def->getOperand(1 - data), -1))
        return failure();
      cur = def->getOperand(data);
    } else if (isa<WhereOp>(def) && def->getNumOperands() == 3) {
      // Where(mask, scores, fill) or Where(mask, fill, scores).
      int data = reachesScores(def->getOperand(1), 6)   ? 1
                 : reachesScores(def->getOperand(2), 6) ? 2
                                                        : -1;
      if (data < 0 || !isScalarNonActivation(def->getOperand(3 - data)) ||
          !takeMask(def->getOperand(0), data == 1 ? 1 : 0))
        return failure();
      cur = def->getOperand(data);
    } else {
      return failure();
    }
    region.add(def);
  }
  region.add(qk);
  // 3. Q and Kᵀ, with scalar scales on each absorbed.
  Value q = absorbScales(qk->getOperand(0), region, qk, scale, scaleKnown);
  Value kt = absorbScales(qk->getOperand(1), region, qk, scale, scaleKnown);
  auto qt = rankedOf(q), ktt = rankedOf(kt);
  int64_t r = pt.getRank();
  if (!qt || !ktt || qt.getRank() != r || ktt.getRank() != r ||
      !qt.hasStaticShape() || !ktt.hasStaticShape() || !vt.hasStaticShape() ||
      !ot.hasStaticShape())
    return failure();
  int64_t sq = qt.getDimSize(r - 2), d = qt.getDimSize(r - 1),
          sk = ktt.getDimSize(r - 1), dv = vt.getDimSize(r - 1),
          heads = qt.getDimSize(r - 3);
  if (ktt.getDimSize(r - 2) != d || vt.getDimSize(r - 2) != sk ||
      pt.getDimSize(r - 2) != sq || pt.getDimSize(r - 1) != sk || heads <= 0)
    return failure();
  int64_t batch = 1;
  for (int64_t i = 0; i < r - 3; ++i)
    batch *= qt.getDimSize(i);
  // K: the tensor transposed into Kᵀ, before any grouped-query repeat.
  Value k;
  if (auto t = kt.getDefiningOp<TransposeOp>();
      t && swapsLastTwo(t) && t->hasOneUse()) {
    region.add(t);
    k = t->getOperand(0);
  } else {
    k = flattenedTranspose(kt, sk, d, region);
  }
  Value kBase = k ? beforeRepeat(k, heads) : Value();
  Value vBase = beforeRepeat(v, heads);
  int64_t kvHeads = heads;
  if (kBase && kBase != k && vBase != v &&
      rankedOf(kBase).getDimSize(r - 3) == rankedOf(vBase).getDimSize(r - 3)) {
    k = kBase;
    v = vBase;
    kvHeads = rankedOf(k).getDimSize(r - 3);
  }
  if (!region.closed(pv))
    return failure();

  OpBuilder b(pv);
  Location loc = pv.getLoc();
  if (!k) {
    // Kᵀ computed directly (torch transposes [b, s, h, d] to [b, h, d, s]):
    // a view back to [.., sk, d].
    SmallVector<int64_t> perm, shape(ktt.getShape());
    for (int64_t i = 0; i < r; ++i)
      perm.push_back(i);
    std::swap(perm[r - 1], perm[r - 2]);
    std::swap(shape[r - 1], shape[r - 2]);
    k = b.create<TransposeOp>(
             loc, TypeRange{RankedTensorType::get(shape, ktt.getElementType())},
             ValueRange{kt},
             ArrayRef<NamedAttribute>{
                 b.getNamedAttr("perm", b.getDenseI64ArrayAttr(perm))})
            ->getResult(0);
  }
  SmallVector<Value> operands{q, k, v};
  if (bias)
    operands.push_back(bias);
  AttentionShape shape{batch, heads, kvHeads, sq, sk, d, dv,
                       scaleKnown ? scale : 0.0, dropout, causal,
                       causal ? window : 0};
  latentAttention(q, k, v, shape);
  shape.sinks = sinks;
  SmallVector<NamedAttribute> attrs = fusedAttentionAttributes(b, shape);
  auto fused = b.create<FusedAttentionOp>(loc, TypeRange{ot}, operands, attrs);
  if (failed(mlir::verify(fused, /*verifyRecursively=*/false))) {
    fused->erase();
    return failure();
  }
  pv->getResult(0).replaceAllUsesWith(fused->getResult(0));
  region.add(pv);
  region.erase(maybeDead);
  return success();
}

/// An attention op the file holds fused (opset 23's Attention) with a mask
/// operand and no is_causal: the dynamo exporter passes transformers'
/// causal (and sliding-window) mask that way, folded with the padding
/// mask. The same reading as a written-out attention's mask: causal and
/// its window when the mask is one; a constant causal mask leaves the op,
/// one that depends on the data (padding) stays as its bias operand.
LogicalResult maskedAttention(FusedAttentionOp op, Dead &maybeDead) {
  if (op.getCausal() || op->getNumOperands() != 4)
    return failure();
  Value mask = op->getOperand(3);
  auto mt = rankedOf(mask);
  if (!mt)
    return failure();
  // ONNX Attention: a boolean mask's true takes part; a float one is added.
  int keep = mt.getElementType().isInteger(1) ? 1 : -1;
  int64_t window = 0;
  bool keepOperand = true;
  if (std::optional<int64_t> band = constantBand(mask, keep)) {
    window = *band;
    keepOperand = false;
  } else if (looksCausal(mask)) {
    llvm::DenseSet<Operation *> seen;
    window = bandWindow(mask, 16, seen);
    keepOperand = isActivation(mask);
  } else {
    return failure();
  }
  OpBuilder b(op);
  SmallVector<NamedAttribute> attrs(op->getAttrs());
  attrs.push_back(b.getNamedAttr("causal", b.getUnitAttr()));
  if (window > 0)
    attrs.push_back(b.getNamedAttr("window", b.getI64IntegerAttr(window)));
  SmallVector<Value> operands(
      op->getOperands().take_front(keepOperand ? 4 : 3));
  auto fused = b.create<FusedAttentionOp>(op.getLoc(), op->getResultTypes(),
                                          operands, attrs);
  if (failed(mlir::verify(fused, /*verifyRecursively=*/false))) {
    fused->erase();
    return failure();
  }
  op->getResult(0).replaceAllUsesWith(fused->getResult(0));
  op->erase();
  if (Operation *def = mask.getDefiningOp(); def && !keepOperand)
    maybeDead.insert(def);
  return success();
}

/// Erases what the rewrites left without users (the causal mask's
/// subgraph, a repeat no one reads), never weights: ops that were unused
/// before the pass stay, as the graph priced them.
void eraseDead(Dead &maybeDead) {
  while (!maybeDead.empty()) {
    Operation *op = maybeDead.pop_back_val();
    if (!op->use_empty() || isa<WeightOp>(op) || op->getNumRegions() ||
        !isa<CostOpInterface>(op))
      continue;
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp())
        maybeDead.insert(def);
    op->erase();
  }
}

//===----------------------------------------------------------------------===//
// Normalizations written out.
//===----------------------------------------------------------------------===//

/// The one user of `v`, or null.
Operation *onlyUser(Value v) {
  return v.hasOneUse() ? *v.getUsers().begin() : nullptr;
}

/// The operand of a two-operand op that is not `v`.
Value otherOperand(Operation *op, Value v) {
  if (op->getNumOperands() != 2)
    return {};
  return op->getOperand(0) == v ? op->getOperand(1) : op->getOperand(0);
}

/// Whether `op` squares `x`: Mul(x, x) or Pow(x, 2).
bool squares(Operation *op, Value x) {
  if (isa<MulOp>(op) && op->getNumOperands() == 2)
    return op->getOperand(0) == x && op->getOperand(1) == x;
  if (isa<PowOp>(op) && op->getNumOperands() == 2 && op->getOperand(0) == x)
    return scalarConstant(op->getOperand(1)) == 2.0;
  return false;
}

/// A mean over the last axis that keeps it.
bool meanOverLastAxis(Operation *op) {
  if (!isa<ReduceMeanOp>(op) || op->getNumResults() != 1)
    return false;
  auto in = rankedOf(op->getOperand(0));
  if (!in || in.getRank() == 0)
    return false;
  if (auto keep = op->getAttrOfType<IntegerAttr>("keepdims"))
    if (keep.getInt() == 0)
      return false;
  int64_t axis;
  if (auto axes = op->getAttrOfType<DenseI64ArrayAttr>("axes")) {
    if (axes.size() != 1)
      return false;
    axis = axes[0];
  } else if (op->getNumOperands() == 2) { // opset 18: axes as an input
    std::optional<double> a = scalarConstant(op->getOperand(1));
    if (!a)
      return false;
    axis = int64_t(*a);
  } else {
    return false;
  }
  return axis == -1 || axis == in.getRank() - 1;
}

/// From the mean of squares `meanSq` of `x`: Add(ε) → Sqrt → Div(x, ·), or
/// → Reciprocal → Mul(x, ·). Returns the normalized value and ε.
std::optional<std::pair<Value, double>> divideByRoot(Value meanSq, Value x,
                                                     Region &region) {
  Operation *add = onlyUser(meanSq);
  if (!add || !isa<AddOp>(add))
    return std::nullopt;
  Value epsV = otherOperand(add, meanSq);
  std::optional<double> eps = epsV ? scalarConstant(epsV) : std::nullopt;
  Operation *sqrt = onlyUser(add->getResult(0));
  if (!eps || !sqrt || !isa<SqrtOp>(sqrt))
    return std::nullopt;
  region.add(add);
  region.add(sqrt);
  Operation *user = onlyUser(sqrt->getResult(0));
  if (!user)
    return std::nullopt;
  if (isa<DivOp>(user) && user->getOperand(0) == x &&
      user->getOperand(1) == sqrt->getResult(0)) {
    region.add(user);
    return std::make_pair(user->getResult(0), *eps);
  }
  // 1 / sqrt(...) then a product: Reciprocal, or Div with the constant 1.
  bool reciprocal =
      isa<ReciprocalOp>(user) ||
      (isa<DivOp>(user) && user->getOperand(1) == sqrt->getResult(0) &&
       scalarConstant(user->getOperand(0)) == 1.0);
  if (reciprocal) {
    Operation *mul = onlyUser(user->getResult(0));
    if (mul && isa<MulOp>(mul) &&
        otherOperand(mul, user->getResult(0)) == x) {
      region.add(user);
      region.add(mul);
      return std::make_pair(mul->getResult(0), *eps);
    }
  }
  return std::nullopt;
}

/// A Mul (or Add) of `v` by a weight-like tensor: the norm's scale (shift).
Value affine(Value v, bool shift, Region &region, Value &param) {
  Operation *user = onlyUser(v);
  if (!user || !(shift ? isa<AddOp>(user) : isa<MulOp>(user)))
    return v;
  Value other = otherOperand(user, v);
  auto t = other ? rankedOf(other) : RankedTensorType();
  auto vt = rankedOf(v);
  if (!t || isActivation(other) || !vt || vt.getRank() == 0 ||
      t.getRank() != 1 || t.getDimSize(0) != vt.getShape().back())
    return v;
  region.add(user);
  param = other;
  return user->getResult(0);
}

/// x → x · 1/sqrt(mean(x²) + ε) · γ (RMSNorm) and x − mean(x) → the same →
/// · γ + β (LayerNorm), anchored at the mean of squares.
LogicalResult fuseNorm(ReduceMeanOp meanSq,
                        Dead &maybeDead) {
  if (!meanOverLastAxis(meanSq))
    return failure();
  Operation *sq = meanSq->getOperand(0).getDefiningOp();
  if (!sq || !sq->hasOneUse() || sq->getNumOperands() != 2)
    return failure();
  Value x = sq->getOperand(0);
  if (!squares(sq, x) || !isActivation(x))
    return failure();
  Region region;
  region.add(sq);
  region.add(meanSq);
  auto normalized = divideByRoot(meanSq->getResult(0), x, region);
  if (!normalized)
    return failure();
  // LayerNorm: x is x₀ − mean(x₀).
  Value input = x, gamma, beta;
  bool layerNorm = false;
  if (auto sub = x.getDefiningOp<SubOp>()) {
    Operation *mean = sub->getOperand(1).getDefiningOp();
    if (mean && meanOverLastAxis(mean) &&
        mean->getOperand(0) == sub->getOperand(0) && mean->hasOneUse()) {
      layerNorm = true;
      region.add(mean);
      region.add(sub);
      input = sub->getOperand(0);
    }
  }
  // The input cast up to fp32 for the statistics (HF's norms): the fused
  // kernel reads the 16-bit input and computes in fp32 itself.
  if (auto cast = input.getDefiningOp<CastOp>()) {
    Region probe = region;
    probe.add(cast);
    bool inside = llvm::all_of(cast->getUsers(), [&](Operation *u) {
      return probe.set.contains(u);
    });
    if (inside) {
      region.add(cast);
      input = cast->getOperand(0);
    }
  }
  Value out = normalized->first;
  // A cast back to the input's type may sit before the scale (HF Llama).
  Operation *cast = onlyUser(out);
  if (cast && isa<CastOp>(cast)) {
    region.add(cast);
    out = cast->getResult(0);
  }
  out = affine(out, false, region, gamma);
  if (layerNorm)
    out = affine(out, true, region, beta);
  Operation *last = out.getDefiningOp();
  if (!region.closed(last))
    return failure();
  OpBuilder b(last);
  Operation *fused;
  if (layerNorm) {
    if (!gamma)
      return failure(); // ONNX LayerNormalization needs a scale
    SmallVector<Value> operands{input, gamma};
    if (beta)
      operands.push_back(beta);
    fused = b.create<LayerNormalizationOp>(
        last->getLoc(), TypeRange{out.getType()}, operands,
        ArrayRef<NamedAttribute>{
            b.getNamedAttr("axis", b.getI64IntegerAttr(-1)),
            b.getNamedAttr("epsilon", b.getF32FloatAttr(normalized->second))});
  } else {
    SmallVector<Value> operands{input};
    if (gamma)
      operands.push_back(gamma);
    fused = b.create<RmsNormalizationOp>(
        last->getLoc(), TypeRange{out.getType()}, operands,
        ArrayRef<NamedAttribute>{
            b.getNamedAttr("epsilon", b.getF64FloatAttr(normalized->second))});
  }
  if (failed(mlir::verify(fused, false))) {
    fused->erase();
    return failure();
  }
  out.replaceAllUsesWith(fused->getResult(0));
  region.erase(maybeDead);
  return success();
}

//===----------------------------------------------------------------------===//
// Gated activations and rotary embeddings.
//===----------------------------------------------------------------------===//

/// silu(gate) · up or gelu(gate) · up, anchored at the activation.
LogicalResult fuseGated(Operation *act,
                        Dead &maybeDead) {
  Value gate = act->getOperand(0);
  Region region;
  region.add(act);
  Value activated = act->getResult(0);
  StringRef kind = "gelu";
  if (isa<SigmoidOp>(act)) {
    Operation *silu = onlyUser(activated);
    if (!silu || !isa<MulOp>(silu) || otherOperand(silu, activated) != gate)
      return failure();
    region.add(silu);
    activated = silu->getResult(0);
    kind = "silu";
  }
  Operation *product = onlyUser(activated);
  if (!product || !isa<MulOp>(product))
    return failure();
  Value up = otherOperand(product, activated);
  if (!up || up == gate || !isActivation(up) || up.getType() != gate.getType() ||
      product->getResult(0).getType() != gate.getType())
    return failure();
  region.add(product);
  // A scale a row after it (a mixture of experts' routing weights): in the
  // kernel too, as Megatron-Core's weighted SwiGLU.
  Operation *end = product;
  SmallVector<Value, 3> operands{gate, up};
  if (Operation *scale = onlyUser(product->getResult(0));
      scale && isa<MulOp>(scale) &&
      scale->getResult(0).getType() == gate.getType()) {
    Value w = otherOperand(scale, product->getResult(0));
    auto g = cast<RankedTensorType>(gate.getType());
    auto wt = w ? dyn_cast<RankedTensorType>(w.getType()) : nullptr;
    if (wt && isActivation(w) && g.getRank() && g.getShape().back() > 1 &&
        wt.hasStaticShape() &&
        wt.getNumElements() * g.getShape().back() == g.getNumElements() &&
        wt.getShape().back() == 1) {
      region.add(scale);
      operands.push_back(w);
      end = scale;
    }
  }
  if (!region.closed(end))
    return failure();
  OpBuilder b(end);
  auto fused = b.create<GatedActivationOp>(
      end->getLoc(), TypeRange{gate.getType()}, operands,
      ArrayRef<NamedAttribute>{
          b.getNamedAttr("activation", b.getStringAttr(kind))});
  end->getResult(0).replaceAllUsesWith(fused->getResult(0));
  region.erase(maybeDead);
  return success();
}

/// The Slice of `x` that `v` is, or null.
Operation *sliceOf(Value v, Value x) {
  auto s = v.getDefiningOp<SliceOp>();
  return s && s->getOperand(0) == x && s->hasOneUse() ? s.getOperation()
                                                      : nullptr;
}

/// x · cos + concat(−x₂, x₁) · sin, anchored at the Add.
LogicalResult fuseRotary(AddOp add,
                        Dead &maybeDead) {
  if (add->getNumOperands() != 2)
    return failure();
  for (int order = 0; order < 2; ++order) {
    auto direct = add->getOperand(order).getDefiningOp<MulOp>();
    auto rotated = add->getOperand(1 - order).getDefiningOp<MulOp>();
    if (!direct || !rotated || !direct->hasOneUse() || !rotated->hasOneUse() ||
        direct->getNumOperands() != 2 || rotated->getNumOperands() != 2)
      continue;
    for (int rd = 0; rd < 2; ++rd) {
      auto concat = rotated->getOperand(rd).getDefiningOp<ConcatOp>();
      Value sin = rotated->getOperand(1 - rd);
      if (!concat || concat->getNumOperands() != 2 || !concat->hasOneUse() ||
          isActivation(sin))
        continue;
      auto neg = concat->getOperand(0).getDefiningOp<NegOp>();
      if (!neg || !neg->hasOneUse())
        continue;
      for (int dd = 0; dd < 2; ++dd) {
        Value x = direct->getOperand(dd), cos = direct->getOperand(1 - dd);
        if (isActivation(cos) || !isActivation(x))
          continue;
        Operation *x2 = sliceOf(neg->getOperand(0), x);
        Operation *x1 = sliceOf(concat->getOperand(1), x);
        if (!x1 || !x2 || x.getType() != add->getResult(0).getType())
          continue;
        Region region;
        for (Operation *op : {x1, x2, neg.getOperation(),
                              concat.getOperation(), direct.getOperation(),
                              rotated.getOperation(), add.getOperation()})
          region.add(op);
        if (!region.closed(add))
          return failure();
        OpBuilder b(add);
        auto fused = b.create<RotaryEmbeddingOp>(
            add->getLoc(), TypeRange{x.getType()}, ValueRange{x, cos, sin},
            ArrayRef<NamedAttribute>{});
        add->getResult(0).replaceAllUsesWith(fused->getResult(0));
        region.erase(maybeDead);
        return success();
      }
    }
  }
  return failure();
}

struct FuseKernelsPass : orrery::impl::FuseKernelsPassBase<FuseKernelsPass> {
  using FuseKernelsPassBase::FuseKernelsPassBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Each rewrite erases only ops that precede its anchor, so anchors
    // collected in program order stay valid while earlier ones fuse.
    Dead maybeDead;
    auto each = [&](auto fn, auto kind) {
      using Op = decltype(kind);
      SmallVector<Op> anchors;
      module.walk([&](Op op) { anchors.push_back(op); });
      for (Op op : anchors)
        (void)fn(op, maybeDead);
      // Dead ops may sit among the next rewrite's anchors: erase them now.
      eraseDead(maybeDead);
    };
    if (attention) {
      each(fuseAttention, MatMulOp());
      each(maskedAttention, FusedAttentionOp());
    }
    if (norms)
      each(fuseNorm, ReduceMeanOp());
    if (gatedActivations) {
      each([](SigmoidOp op, auto &dead) { return fuseGated(op, dead); },
           SigmoidOp());
      each([](GeluOp op, auto &dead) { return fuseGated(op, dead); }, GeluOp());
    }
    if (rotary)
      each(fuseRotary, AddOp());
  }
};

} // namespace
