//===- UpstreamForm.cpp - a sharded module in upstream MLIR dialects only -===//
#include "orrery/Transforms/UpstreamForm.h"
#include "orrery/Transforms/DimFactors.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"

#include <algorithm>

#include <cmath>
#include <functional>
#include <limits>

using namespace mlir;

namespace orrery {
namespace {

/// Scalar arithmetic on floats or integers inside a linalg body.
struct Scalar {
  OpBuilder &b;
  Location loc;
  static bool isFloat(Value v) { return isa<FloatType>(v.getType()); }
  Value cst(Type t, double x) {
    if (isa<FloatType>(t))
      return arith::ConstantOp::create(b, loc, t, b.getFloatAttr(t, x));
    // Integers saturate (a max-reduction's -inf start is the type's least).
    unsigned w = t.getIntOrFloatBitWidth();
    double edge = std::ldexp(1.0, int(w) - 1);
    APInt v = w == 1         ? APInt(1, x != 0 ? 1 : 0)
              : std::isnan(x)  ? APInt(w, 0)
              : x < -edge    ? APInt::getSignedMinValue(w)
              : x >= edge    ? APInt::getSignedMaxValue(w)
                             : APInt(w, uint64_t(int64_t(x)), true);
    return arith::ConstantOp::create(b, loc, t, b.getIntegerAttr(t, v));
  }
  /// The float op on floats, the integer op on integers.
  template <typename FOp, typename IOp> Value either(Value x, Value y) {
    return isFloat(x) ? Value(FOp::create(b, loc, x, y))
                      : Value(IOp::create(b, loc, x, y));
  }
  Value add(Value x, Value y) { return either<arith::AddFOp, arith::AddIOp>(x, y); }
  Value sub(Value x, Value y) { return either<arith::SubFOp, arith::SubIOp>(x, y); }
  Value mul(Value x, Value y) { return either<arith::MulFOp, arith::MulIOp>(x, y); }
  Value div(Value x, Value y) { return either<arith::DivFOp, arith::DivSIOp>(x, y); }
  Value max(Value x, Value y) {
    return either<arith::MaximumFOp, arith::MaxSIOp>(x, y);
  }
  Value min(Value x, Value y) {
    return either<arith::MinimumFOp, arith::MinSIOp>(x, y);
  }
  Value convert(Value x, Type to) {
    Type from = x.getType();
    if (from == to)
      return x;
    bool ff = isa<FloatType>(from), ft = isa<FloatType>(to);
    if (ff && ft)
      return from.getIntOrFloatBitWidth() < to.getIntOrFloatBitWidth()
                 ? Value(arith::ExtFOp::create(b, loc, to, x))
                 : Value(arith::TruncFOp::create(b, loc, to, x));
    if (!ff && ft)
      return from.isInteger(1) ? Value(arith::UIToFPOp::create(b, loc, to, x))
                               : Value(arith::SIToFPOp::create(b, loc, to, x));
    if (ff && !ft)
      return arith::FPToSIOp::create(b, loc, to, x);
    return from.getIntOrFloatBitWidth() < to.getIntOrFloatBitWidth()
               ? Value(arith::ExtSIOp::create(b, loc, to, x))
               : Value(arith::TruncIOp::create(b, loc, to, x));
  }
  Value sigmoid(Value x) {
    Value one = cst(x.getType(), 1);
    Value e = math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, x));
    return div(one, add(one, e));
  }
  Value gelu(Value x) { // 0.5 x (1 + erf(x / sqrt 2))
    Value e = math::ErfOp::create(b, loc, mul(x, cst(x.getType(), M_SQRT1_2)));
    return mul(mul(x, cst(x.getType(), 0.5)), add(cst(x.getType(), 1), e));
  }
};

/// One operand of a generic op: the value and a loop key per dim (a factor
/// id, or a key of the op's own where one factor plays two parts).
struct In {
  Value v;
  SmallVector<int> keys;
};

using Body = std::function<Value(Scalar &, ValueRange args,
                                 const std::function<Value(int)> &index)>;
using IndexedBody = std::function<Value(Scalar &, ArrayRef<Value> at)>;

class Emitter {
public:
  Emitter(ModuleOp in, std::string &error)
      : in(in), b(in.getContext()), error(error) {}
  OwningOpRef<ModuleOp> run();

private:
  bool fail(Operation *op, const std::string &why) {
    if (error.empty())
      error = op->getName().getStringRef().str() + " " + why;
    return false;
  }
  Value get(Value v);
  Value indexed(RankedTensorType type, const IndexedBody &body);
  Value constant(DenseElementsAttr value, RankedTensorType type);
  Value iota(int64_t n);
  int freshKey(int64_t size) {
    keySizes[--lastKey] = size;
    return lastKey;
  }
  Value generic(ArrayRef<In> ins, ArrayRef<int> outKeys, RankedTensorType type,
                std::optional<double> init, const Body &body);
  Value filled(RankedTensorType type, double value);
  Value annotated(Value v, ArrayRef<int> keys);
  int pickLeaf(ArrayRef<int> leaves, int64_t ways);
  int64_t waysOf(shard::GridAxesAttr axes);
  void collectAxes();
  RankedTensorType typeOf(ArrayRef<int> keys, Type element);
  SmallVector<int> keysOf(Value v) { return f.leaves(v); }

  bool emitFunc(func::FuncOp fn);
  bool emitOp(Operation *op);
  bool emitShard(shard::ShardOp op);
  bool emitElementwise(Operation *op, StringRef name);
  bool emitContraction(Operation *op, StringRef name);
  bool emitMove(Operation *op, StringRef name);
  bool emitNormalization(Operation *op, StringRef name);
  bool emitReduce(Operation *op, StringRef name);
  bool emitGather(Operation *op);
  bool emitAttention(Operation *op);
  bool emitRotary(Operation *op);

  ModuleOp in;
  OpBuilder b;
  std::string &error;
  DimFactors f;
  DenseMap<Value, Value> vals;
  Location loc = UnknownLoc::get(in.getContext());
  int lastKey = 0;
  DenseMap<int, int64_t> keySizes; // of an op's own keys
  DenseMap<int, shard::GridAxesAttr> axesOf; // by factor, from the plan
  SmallVector<int64_t> gridSizes;
  FlatSymbolRefAttr grid;
};

Value Emitter::get(Value v) {
  auto it = vals.find(v);
  if (it != vals.end())
    return it->second;
  Operation *def = v.getDefiningOp();
  if (!def || def->getName().getStringRef() != "orrery.constant")
    return {};
  auto value = def->getAttrOfType<DenseElementsAttr>("value");
  RankedTensorType type = f.factoredType(v);
  if (!value || type.getNumElements() > (1 << 16))
    return {};
  Value c = constant(value, type);
  if (c)
    vals[v] = c = annotated(c, keysOf(v));
  return c;
}

/// A tensor whose elements `body` computes from their indices (one loop
/// per dim, given in dim order).
Value Emitter::indexed(RankedTensorType type, const IndexedBody &body) {
  SmallVector<int> keys;
  for (int64_t n : type.getShape())
    keys.push_back(freshKey(n));
  return generic({}, keys, type, std::nullopt,
                 [&](Scalar &s, ValueRange, const std::function<Value(int)> &index) {
                   SmallVector<Value> at;
                   for (int k : keys)
                     at.push_back(index(k));
                   Value v = body(s, at);
                   if (v.getType().isIndex())
                     v = arith::IndexCastOp::create(s.b, s.loc, s.b.getI64Type(), v);
                   return s.convert(v, type.getElementType());
                 });
}

/// The steps per dim when `xs` (row-major over `shape`) is affine in the
/// indices, to `tolerance` (absolute); false otherwise.
static bool affineSteps(ArrayRef<double> xs, ArrayRef<int64_t> shape,
                        double tolerance, SmallVector<double> &step) {
  step.assign(shape.size(), 0);
  int64_t stride = 1;
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; stride *= shape[d], --d)
    step[d] = shape[d] > 1 ? (xs[(shape[d] - 1) * stride] - xs[0]) /
                                 double(shape[d] - 1)
                           : 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    double want = xs[0];
    int64_t rest = int64_t(i);
    for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
      want += step[d] * double(rest % shape[d]);
      rest /= shape[d];
    }
    if (std::fabs(want - xs[i]) > tolerance)
      return false;
  }
  return true;
}

/// A constant as ops: a splat fills; a tensor affine in its indices, or the
/// exponential of one, is computed from them. Upstream's partitioner cannot
/// split any other dense constant, so none other has an upstream form.
Value Emitter::constant(DenseElementsAttr value, RankedTensorType type) {
  SmallVector<double> xs;
  for (auto x : value.getValues<Attribute>()) {
    if (auto fa = dyn_cast<FloatAttr>(x))
      xs.push_back(fa.getValueAsDouble());
    else if (auto ia = dyn_cast<IntegerAttr>(x))
      xs.push_back(double(ia.getValue().getSExtValue()));
    else
      return {};
  }
  if (value.isSplat() || xs.size() <= 1)
    return filled(type, xs.empty() ? 0 : xs[0]);
  // Affine in the indices (position ids), or its exponential (RoPE's
  // inverse frequencies, base^(-2i/d)) to float precision.
  for (bool exponential : {false, true}) {
    SmallVector<double> ys(xs);
    if (exponential) {
      if (llvm::any_of(xs, [](double x) { return x <= 0; }))
        return {};
      for (double &y : ys)
        y = std::log(y);
    }
    SmallVector<double> step;
    if (!affineSteps(ys, type.getShape(), exponential ? 1e-6 : 1e-9, step))
      continue;
    return indexed(type, [&, exponential, ys](Scalar &s, ArrayRef<Value> at) {
      Type f64 = s.b.getF64Type();
      Value v = s.cst(f64, ys[0]);
      for (size_t d = 0; d < at.size(); ++d) {
        Value i = arith::IndexCastOp::create(s.b, s.loc, s.b.getI64Type(), at[d]);
        v = s.add(v, s.mul(s.convert(i, f64), s.cst(f64, step[d])));
      }
      return exponential ? Value(math::ExpOp::create(s.b, s.loc, v)) : v;
    });
  }
  return {};
}

/// 0, 1, ..., n-1 as i64: an operand where a body needs its global index
/// (upstream's partitioner crashes on linalg.index over a split loop, and a
/// sliced operand keeps the global index where linalg.index would not).
Value Emitter::iota(int64_t n) {
  return indexed(RankedTensorType::get({n}, b.getI64Type()),
                 [](Scalar &, ArrayRef<Value> at) { return at[0]; });
}

RankedTensorType Emitter::typeOf(ArrayRef<int> keys, Type element) {
  SmallVector<int64_t> shape;
  for (int k : keys)
    shape.push_back(k < 0 ? keySizes.lookup(k) : f.size(k));
  return RankedTensorType::get(shape, element);
}

Value Emitter::filled(RankedTensorType type, double value) {
  Value empty = tensor::EmptyOp::create(b, loc, type.getShape(),
                                        type.getElementType());
  Scalar s{b, loc};
  Value c = s.cst(type.getElementType(), value);
  return linalg::FillOp::create(b, loc, c, empty).getResult(0);
}

/// A linalg.generic over the loops of `outKeys` (parallel) and every other
/// key of `ins` (reductions into a tensor filled with `init`).
Value Emitter::generic(ArrayRef<In> ins, ArrayRef<int> outKeys,
                       RankedTensorType type, std::optional<double> init,
                       const Body &body) {
  SmallVector<int> loops(outKeys);
  for (const In &x : ins)
    for (int k : x.keys)
      if (!llvm::is_contained(loops, k))
        loops.push_back(k);
  auto position = [&](int k) {
    return unsigned(llvm::find(loops, k) - loops.begin());
  };
  auto mapOf = [&](ArrayRef<int> keys) -> AffineMap {
    SmallVector<AffineExpr> exprs;
    for (int k : keys)
      exprs.push_back(b.getAffineDimExpr(position(k)));
    return AffineMap::get(loops.size(), 0, exprs, b.getContext());
  };
  for (const In &x : ins)
    if (llvm::SmallDenseSet<int>(x.keys.begin(), x.keys.end()).size() !=
        x.keys.size())
      return {}; // one dim twice in one operand
  SmallVector<AffineMap> maps;
  SmallVector<Value> inputs;
  for (const In &x : ins) {
    maps.push_back(mapOf(x.keys));
    inputs.push_back(x.v);
  }
  maps.push_back(mapOf(outKeys));
  SmallVector<utils::IteratorType> iters;
  for (size_t i = 0; i < loops.size(); ++i)
    iters.push_back(i < outKeys.size() ? utils::IteratorType::parallel
                                       : utils::IteratorType::reduction);
  // Every value the partitioner meets carries its sharding: propagation
  // leaves some inits and operand-less ops without one, and the partitioner
  // then fails on them.
  Value out = annotated(tensor::EmptyOp::create(b, loc, type.getShape(),
                                                type.getElementType()),
                        outKeys);
  if (init) {
    Scalar s{b, loc};
    Value c = s.cst(type.getElementType(), *init);
    out = annotated(linalg::FillOp::create(b, loc, c, out).getResult(0),
                    outKeys);
  }
  auto op = linalg::GenericOp::create(
      b, loc, TypeRange{type}, inputs, ValueRange{out}, maps, iters,
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Scalar s{nb, l};
        auto index = [&](int key) -> Value {
          return linalg::IndexOp::create(nb, l, position(key));
        };
        linalg::YieldOp::create(nb, l, body(s, args, index));
      });
  return annotated(op.getResult(0), outKeys);
}

OwningOpRef<ModuleOp> Emitter::run() {
  MLIRContext *ctx = in.getContext();
  ctx->loadDialect<arith::ArithDialect, func::FuncDialect,
                   linalg::LinalgDialect, math::MathDialect,
                   tensor::TensorDialect, shard::ShardDialect>();
  if (!f.build(in, error))
    return nullptr;
  for (auto g : in.getOps<shard::GridOp>()) {
    gridSizes.assign(g.getShape().begin(), g.getShape().end());
    grid = FlatSymbolRefAttr::get(g.getSymNameAttr());
  }
  collectAxes();
  OwningOpRef<ModuleOp> out = ModuleOp::create(in.getLoc());
  for (NamedAttribute a : in->getDiscardableAttrs())
    (*out)->setAttr(a.getName(), a.getValue());
  b.setInsertionPointToEnd(out->getBody());
  for (Operation &op : in.getBody()->getOperations()) {
    if (isa<shard::GridOp>(op)) {
      b.clone(op);
    } else if (auto fn = dyn_cast<func::FuncOp>(op)) {
      OpBuilder::InsertionGuard guard(b);
      if (!emitFunc(fn))
        return nullptr;
    } else {
      error = op.getName().getStringRef().str() + " at module level has no "
              "upstream form";
      return nullptr;
    }
  }
  return out;
}

bool Emitter::emitFunc(func::FuncOp fn) {
  SmallVector<Type> args;
  SmallVector<DictionaryAttr> argAttrs;
  for (BlockArgument a : fn.getArguments()) {
    if (!isa<RankedTensorType>(a.getType()))
      return fail(fn, "@" + fn.getSymName().str() + " takes a non-tensor");
    args.push_back(f.factoredType(a));
    argAttrs.push_back(fn.getArgAttrDict(a.getArgNumber()));
  }
  SmallVector<Operation *> weights;
  for (Operation &op : fn.getOps())
    if (op.getName().getStringRef() == "orrery.weight") {
      weights.push_back(&op);
      args.push_back(f.factoredType(op.getResult(0)));
      SmallVector<NamedAttribute> attrs{
          b.getNamedAttr("orrery.name", op.getAttr("name"))};
      if (op.hasAttr("trainable"))
        attrs.push_back(b.getNamedAttr("orrery.trainable", b.getUnitAttr()));
      argAttrs.push_back(b.getDictionaryAttr(attrs));
    }
  auto ret = cast<func::ReturnOp>(fn.getBody().back().getTerminator());
  SmallVector<Type> results;
  for (Value r : ret.getOperands())
    results.push_back(f.factoredType(r));
  auto nf = func::FuncOp::create(b, fn.getLoc(), fn.getSymName(),
                                 b.getFunctionType(args, results));
  nf.setVisibility(fn.getVisibility());
  for (auto [i, d] : llvm::enumerate(argAttrs))
    if (d)
      nf.setArgAttrs(i, d);
  for (unsigned i = 0; i < fn.getNumResults(); ++i)
    if (DictionaryAttr d = fn.getResultAttrDict(i))
      nf.setResultAttrs(i, d);
  Block *entry = nf.addEntryBlock();
  for (BlockArgument a : fn.getArguments())
    vals[a] = entry->getArgument(a.getArgNumber());
  for (auto [i, w] : llvm::enumerate(weights))
    vals[w->getResult(0)] = entry->getArgument(fn.getNumArguments() + i);
  b.setInsertionPointToStart(entry);
  for (Operation &op : fn.getOps())
    if (!emitOp(&op))
      return false;
  return true;
}

bool Emitter::emitOp(Operation *op) {
  StringRef full = op->getName().getStringRef(), name = full;
  name.consume_front("orrery.");
  loc = op->getLoc();
  auto operands = [&](SmallVector<Value> &out) {
    for (Value v : op->getOperands()) {
      out.push_back(get(v));
      if (!out.back())
        return false;
    }
    return true;
  };
  if (isa<shard::ShardingOp>(op) || name == "weight" || name == "constant" ||
      name == "none")
    return true;
  if (auto s = dyn_cast<shard::ShardOp>(op))
    return emitShard(s);
  if (auto call = dyn_cast<func::CallOp>(op)) {
    SmallVector<Value> args;
    SmallVector<Type> types;
    if (!operands(args))
      return fail(op, "passes a value with no upstream form");
    for (Value r : call.getResults())
      types.push_back(f.factoredType(r));
    auto nc = func::CallOp::create(b, loc, call.getCallee(), types, args);
    if (Attribute stage = op->getAttr("orrery.stage"))
      nc->setAttr("orrery.stage", stage);
    for (auto [r, n] : llvm::zip(call.getResults(), nc.getResults()))
      vals[r] = n;
    return true;
  }
  if (isa<func::ReturnOp>(op)) {
    SmallVector<Value> args;
    if (!operands(args))
      return fail(op, "returns a value with no upstream form");
    func::ReturnOp::create(b, loc, args);
    return true;
  }
  if (name == "matmul" || name == "gemm")
    return emitContraction(op, name);
  if (name == "reshape" || name == "squeeze" || name == "unsqueeze" ||
      name == "flatten" || name == "transpose" || name == "identity" ||
      name == "dropout" || name == "split" || name == "concat" ||
      name == "slice" || name == "expand")
    return emitMove(op, name);
  if (name == "layer_normalization" || name == "rms_normalization" ||
      name == "softmax" || name == "log_softmax")
    return emitNormalization(op, name);
  if (name.starts_with("reduce_"))
    return emitReduce(op, name);
  if (name == "gather")
    return emitGather(op);
  if (name == "fused_attention")
    return emitAttention(op);
  if (name == "rotary_embedding")
    return emitRotary(op);
  return emitElementwise(op, name);
}

int64_t Emitter::waysOf(shard::GridAxesAttr axes) {
  int64_t ways = 1;
  for (int16_t a : axes.asArrayRef())
    ways *= a < int16_t(gridSizes.size()) ? gridSizes[a] : 1;
  return ways;
}

/// A plan's split of an orrery dim lands on one factor of that dim: the
/// attention heads where the dim has them, else the first the axes divide;
/// -1 if none.
int Emitter::pickLeaf(ArrayRef<int> leaves, int64_t ways) {
  for (int pass = 0; pass < 2; ++pass)
    for (unsigned i = 0; i < leaves.size(); ++i)
      if (f.size(leaves[i]) % ways == 0 && (pass || f.isHeads(leaves[i])))
        return int(i);
  return -1;
}

/// The grid axes of each factor, from the plan's annotations: a factor the
/// plan splits somewhere and leaves whole nowhere (a hidden size that a
/// weight splits but the residual stream keeps whole gets none; propagation
/// decides those values).
void Emitter::collectAxes() {
  llvm::DenseSet<int> whole;
  in.walk([&](shard::ShardOp op) {
    auto sharding = op.getSharding().getDefiningOp<shard::ShardingOp>();
    if (!sharding)
      return;
    ArrayRef<shard::GridAxesAttr> axes = sharding.getSplitAxes().getAxes();
    for (unsigned d = 0; d < f.dimsOf(op.getSrc()).size(); ++d) {
      SmallVector<int> leaves = f.leavesOfDim(op.getSrc(), d);
      bool split = d < axes.size() && !axes[d].empty();
      int pick = split ? pickLeaf(leaves, waysOf(axes[d])) : -1;
      if (pick >= 0 && !axesOf.count(leaves[pick]))
        axesOf[leaves[pick]] = axes[d];
      for (int i = 0; i < int(leaves.size()); ++i)
        if (i != pick)
          whole.insert(leaves[i]);
    }
  });
  for (int k : whole)
    axesOf.erase(k);
}

/// `v` annotated with the axes of its factors (each grid axis once).
Value Emitter::annotated(Value v, ArrayRef<int> keys) {
  if (!v || !grid)
    return v;
  SmallVector<shard::GridAxesAttr> split;
  llvm::SmallDenseSet<int16_t> used;
  for (int k : keys) {
    shard::GridAxesAttr axes = k >= 0 ? axesOf.lookup(k) : nullptr;
    bool ok = axes && !axes.empty() && f.size(k) % waysOf(axes) == 0 &&
              llvm::none_of(axes.asArrayRef(),
                            [&](int16_t a) { return used.contains(a); });
    split.push_back(ok ? axes : b.getDenseI16ArrayAttr({}));
    if (ok)
      used.insert(axes.asArrayRef().begin(), axes.asArrayRef().end());
  }
  while (split.size() > 1 && split.back().empty())
    split.pop_back();
  if (split.empty())
    split.push_back(b.getDenseI16ArrayAttr({}));
  auto sharding = shard::ShardingOp::create(b, loc, grid, split);
  return shard::ShardOp::create(b, loc, v, sharding, false);
}

bool Emitter::emitShard(shard::ShardOp op) {
  Value x = op.getSrc(), nx = get(x);
  if (!nx)
    return fail(op, "annotates a value with no upstream form");
  auto sharding = op.getSharding().getDefiningOp<shard::ShardingOp>();
  RankedTensorType type = f.factoredType(x);
  if (!sharding || type.getRank() == 0) {
    vals[op.getResult()] = nx;
    return true;
  }
  SmallVector<shard::GridAxesAttr> split(type.getRank(),
                                         b.getDenseI16ArrayAttr({}));
  unsigned offset = 0;
  ArrayRef<shard::GridAxesAttr> axes = sharding.getSplitAxes().getAxes();
  for (unsigned d = 0; d < f.dimsOf(x).size(); ++d) {
    SmallVector<int> leaves = f.leavesOfDim(x, d);
    if (d < axes.size() && !axes[d].empty()) {
      int pick = pickLeaf(leaves, waysOf(axes[d]));
      if (pick < 0)
        return fail(op, "splits a dim none of whose factors the grid divides");
      split[offset + pick] = axes[d];
    }
    offset += leaves.size();
  }
  while (split.size() > 1 && split.back().empty())
    split.pop_back();
  auto ns = shard::ShardingOp::create(b, loc, sharding.getGrid(), split);
  auto nop = shard::ShardOp::create(b, loc, nx, ns, op.getAnnotateForUsers());
  vals[op.getResult()] = nop;
  return true;
}

bool Emitter::emitElementwise(Operation *op, StringRef name) {
  if (op->getNumResults() != 1)
    return fail(op, "has no upstream MLIR form yet");
  Value r = op->getResult(0);
  RankedTensorType type = f.factoredType(r);
  Type et = type.getElementType();
  SmallVector<In> ins;
  for (Value x : op->getOperands()) {
    if (!isa<RankedTensorType>(x.getType()))
      continue;
    Value nx = get(x);
    if (!nx)
      return fail(op, "has an operand with no upstream form");
    ins.push_back({nx, keysOf(x)});
  }
  bool isFloat = isa<FloatType>(et);
  auto body = [&](Scalar &s, ValueRange a, const std::function<Value(int)> &) {
    auto arg = [&](unsigned i) {
      return name == "where" || name == "cast" ? a[i] : s.convert(a[i], et);
    };
    Value x = arg(0);
    if (name == "add") return s.add(x, arg(1));
    if (name == "sub") return s.sub(x, arg(1));
    if (name == "mul") return s.mul(x, arg(1));
    if (name == "div") return s.div(x, arg(1));
    if (name == "max") return s.max(x, arg(1));
    if (name == "min") return s.min(x, arg(1));
    if (name == "cast") return s.convert(x, et);
    if (name == "where")
      return Value(arith::SelectOp::create(s.b, s.loc, a[0], a[1], a[2]));
    if (name == "relu") return s.max(x, s.cst(et, 0));
    if (name == "pow") return Value(math::PowFOp::create(s.b, s.loc, x, arg(1)));
    if (name == "gated_activation") {
      Value g = op->getAttrOfType<StringAttr>("activation").getValue() == "gelu"
                    ? s.gelu(x) : s.mul(x, s.sigmoid(x));
      return s.mul(g, arg(1));
    }
    if (name == "sigmoid") return s.sigmoid(x);
    if (name == "gelu") return s.gelu(x);
    if (name == "reciprocal") return s.div(s.cst(et, 1), x);
    if (name == "neg") return Value(arith::NegFOp::create(s.b, s.loc, x));
    if (name == "softplus")
      return Value(math::Log1pOp::create(
          s.b, s.loc, math::ExpOp::create(s.b, s.loc, x)));
    return Value(llvm::StringSwitch<std::function<Value()>>(name)
        .Case("abs", [&] { return math::AbsFOp::create(s.b, s.loc, x); })
        .Case("tanh", [&] { return math::TanhOp::create(s.b, s.loc, x); })
        .Case("erf", [&] { return math::ErfOp::create(s.b, s.loc, x); })
        .Case("exp", [&] { return math::ExpOp::create(s.b, s.loc, x); })
        .Case("log", [&] { return math::LogOp::create(s.b, s.loc, x); })
        .Case("sqrt", [&] { return math::SqrtOp::create(s.b, s.loc, x); })
        .Case("sin", [&] { return math::SinOp::create(s.b, s.loc, x); })
        .Default([&] { return math::CosOp::create(s.b, s.loc, x); })());
  };
  static const llvm::StringSet<> integerOk = {"add", "sub", "mul", "div",
                                              "max", "min", "cast", "where"};
  static const llvm::StringSet<> known = {
      "add", "sub", "mul", "div", "max", "min", "cast", "where", "relu", "pow",
      "gated_activation", "sigmoid", "gelu", "reciprocal", "neg", "softplus",
      "abs", "tanh", "erf", "exp", "log", "sqrt", "sin", "cos"};
  if (!known.contains(name) || (!isFloat && !integerOk.contains(name)))
    return fail(op, "has no upstream MLIR form yet");
  Value v = generic(ins, keysOf(r), type, std::nullopt, body);
  if (!v)
    return fail(op, "uses one dim twice");
  vals[r] = v;
  return true;
}


bool Emitter::emitContraction(Operation *op, StringRef name) {
  Value a = op->getOperand(0), bv = op->getOperand(1), r = op->getResult(0);
  Value na = get(a), nb = get(bv);
  if (!na || !nb)
    return fail(op, "has an operand with no upstream form");
  auto fl = [&](StringRef n, double d) {
    auto at = op->getAttrOfType<FloatAttr>(n);
    return at ? at.getValueAsDouble() : d;
  };
  if (name == "gemm" && (fl("alpha", 1) != 1 || fl("beta", 1) != 1))
    return fail(op, "scales its product (no upstream form here)");
  RankedTensorType type = f.factoredType(r);
  Value v = generic({{na, keysOf(a)}, {nb, keysOf(bv)}}, keysOf(r), type, 0.0,
                    [](Scalar &s, ValueRange x, const std::function<Value(int)> &) {
                      return s.add(x[2], s.mul(x[0], x[1]));
                    });
  if (!v)
    return fail(op, "uses one dim twice");
  if (name == "gemm" && op->getNumOperands() > 2 &&
      isa<RankedTensorType>(op->getOperand(2).getType())) {
    Value c = get(op->getOperand(2));
    if (!c)
      return fail(op, "has a bias with no upstream form");
    v = generic({{v, keysOf(r)}, {c, keysOf(op->getOperand(2))}}, keysOf(r),
                type, std::nullopt,
                [](Scalar &s, ValueRange x, const std::function<Value(int)> &) {
                  return s.add(x[0], x[1]);
                });
  }
  vals[r] = v;
  return true;
}

/// Ops that only move data: in the factored form a reshape, a unit dim and
/// dropout are nothing, a transpose or an expand is a copy with permuted or
/// broadcast maps, a split, a concat or a slice of an equal part a
/// contraction with one-hot selectors over the parts.
bool Emitter::emitMove(Operation *op, StringRef name) {
  Value x = op->getOperand(0), nx = get(x);
  if (!nx)
    return fail(op, "has an operand with no upstream form");
  bool part = (name == "slice" || name == "gather") && f.opAtom.count(op);
  if (name == "split" || name == "concat" || part) {
    bool isSplit = name != "concat";
    SmallVector<int> piece = f.leavesOfAtom(f.opAtom.lookup(op));
    int64_t parts = part ? f.size(f.opAtom.lookup(op))
                    : isSplit ? op->getNumResults()
                              : op->getNumOperands();
    if (piece.size() != 1 || f.size(piece[0]) != parts)
      return fail(op, "has parts that other ops factor (no upstream form)");
    Type et = cast<RankedTensorType>(x.getType()).getElementType();
    auto selector = [&](int64_t i) -> Value {
      return indexed(RankedTensorType::get({parts}, et),
                     [&](Scalar &s, ArrayRef<Value> at) -> Value {
                       Value hit = arith::CmpIOp::create(
                           s.b, s.loc, arith::CmpIPredicate::eq, at[0],
                           arith::ConstantIndexOp::create(s.b, s.loc, i));
                       return arith::SelectOp::create(s.b, s.loc, hit,
                                                      s.cst(et, 1), s.cst(et, 0));
                     });
    };
    if (isSplit) {
      for (auto [i, r] : llvm::enumerate(op->getResults())) {
        RankedTensorType type = f.factoredType(r);
        Value pick = selector(part ? f.opIndex.lookup(op) : int64_t(i));
        vals[r] = generic(
            {{nx, keysOf(x)}, {pick, {piece[0]}}}, keysOf(r), type, 0.0,
            [](Scalar &s, ValueRange a, const std::function<Value(int)> &) {
              return s.add(a[2], s.mul(a[0], a[1]));
            });
      }
      return true;
    }
    Value r = op->getResult(0);
    SmallVector<In> ins;
    for (auto [i, p] : llvm::enumerate(op->getOperands())) {
      Value np = get(p);
      if (!np)
        return fail(op, "has an operand with no upstream form");
      ins.push_back({np, keysOf(p)});
      ins.push_back({selector(i), {piece[0]}});
    }
    vals[r] = generic(ins, keysOf(r), f.factoredType(r), std::nullopt,
                      [](Scalar &s, ValueRange a,
                         const std::function<Value(int)> &) {
                        Value sum = s.mul(a[0], a[1]);
                        for (size_t i = 2; i + 1 < a.size(); i += 2)
                          sum = s.add(sum, s.mul(a[i], a[i + 1]));
                        return sum;
                      });
    return true;
  }
  Value r = op->getResult(0);
  SmallVector<int> from = keysOf(x), to = keysOf(r);
  if (from == to) {
    vals[r] = nx;
    return true;
  }
  // A permutation (transpose), or a broadcast (expand) into more dims.
  if (llvm::any_of(from, [&](int k) { return !llvm::is_contained(to, k); }))
    return fail(op, "moves dims that do not factor alike");
  vals[r] = generic({{nx, from}}, to, f.factoredType(r), std::nullopt,
                    [](Scalar &, ValueRange a, const std::function<Value(int)> &) {
                      return a[0];
                    });
  return vals[r] ? true : fail(op, "uses one dim twice");
}

/// The leaves of `x`'s dims from `axis` (negative from the end) on, or of
/// that one dim.
static SmallVector<int> axisLeaves(DimFactors &f, Value x, int64_t axis,
                                   bool trailing) {
  int64_t rank = cast<RankedTensorType>(x.getType()).getRank();
  if (axis < 0)
    axis += rank;
  SmallVector<int> out;
  for (int64_t d = axis; d < (trailing ? rank : axis + 1); ++d)
    out.append(f.leavesOfDim(x, d));
  return out;
}

static int64_t product(DimFactors &f, ArrayRef<int> keys) {
  int64_t n = 1;
  for (int k : keys)
    n *= f.size(k);
  return n;
}

/// Layer and RMS norms over their trailing axes, softmax over one.
bool Emitter::emitNormalization(Operation *op, StringRef name) {
  Value x = op->getOperand(0), r = op->getResult(0), nx = get(x);
  if (!nx)
    return fail(op, "has an operand with no upstream form");
  auto axisAttr = op->getAttrOfType<IntegerAttr>("axis");
  int64_t axis = axisAttr ? axisAttr.getInt() : -1;
  bool softmax = name.ends_with("softmax");
  SmallVector<int> all = keysOf(x), red = axisLeaves(f, x, axis, !softmax),
                   kept;
  for (int k : all)
    if (!llvm::is_contained(red, k))
      kept.push_back(k);
  Type et = cast<RankedTensorType>(x.getType()).getElementType();
  RankedTensorType rowType = typeOf(kept, et), type = f.factoredType(r);
  double inv = 1.0 / double(product(f, red));
  using Idx = const std::function<Value(int)> &;
  auto rowReduce = [&](SmallVector<In> ins, double init, const Body &body) {
    return generic(ins, kept, rowType, init, body);
  };
  SmallVector<In> extra; // scale and bias
  for (Value w : llvm::drop_begin(op->getOperands()))
    if (isa<RankedTensorType>(w.getType())) {
      if (!get(w))
        return fail(op, "has a scale with no upstream form");
      extra.push_back({get(w), keysOf(w)});
    }
  auto epsAttr = op->getAttrOfType<FloatAttr>("epsilon");
  double eps = epsAttr ? epsAttr.getValueAsDouble() : 1e-5;
  Value y;
  if (softmax) {
    Value m = rowReduce({{nx, all}}, -INFINITY,
                        [](Scalar &s, ValueRange a, Idx) { return s.max(a[1], a[0]); });
    Value e = generic({{nx, all}, {m, kept}}, all, type, std::nullopt,
                      [](Scalar &s, ValueRange a, Idx) {
                        return Value(math::ExpOp::create(s.b, s.loc, s.sub(a[0], a[1])));
                      });
    Value l = rowReduce({{e, all}}, 0,
                        [](Scalar &s, ValueRange a, Idx) { return s.add(a[1], a[0]); });
    bool log = name == "log_softmax";
    y = generic({{nx, all}, {m, kept}, {e, all}, {l, kept}}, all, type, std::nullopt,
                [&](Scalar &s, ValueRange a, Idx) {
                  if (!log)
                    return s.div(a[2], a[3]);
                  return s.sub(s.sub(a[0], a[1]),
                               Value(math::LogOp::create(s.b, s.loc, a[3])));
                });
  } else {
    bool rms = name == "rms_normalization";
    Value mean;
    if (!rms)
      mean = rowReduce({{nx, all}}, 0, [&](Scalar &s, ValueRange a, Idx) {
        return s.add(a[1], s.mul(a[0], s.cst(et, inv)));
      });
    SmallVector<In> varIns{{nx, all}};
    if (!rms)
      varIns.push_back({mean, kept});
    Value var = rowReduce(varIns, 0, [&](Scalar &s, ValueRange a, Idx) {
      Value c = rms ? a[0] : s.sub(a[0], a[1]);
      return s.add(a.back(), s.mul(s.mul(c, c), s.cst(et, inv)));
    });
    SmallVector<In> ins{{nx, all}, {var, kept}};
    if (!rms)
      ins.push_back({mean, kept});
    ins.append(extra);
    y = generic(ins, all, type, std::nullopt, [&](Scalar &s, ValueRange a, Idx) {
      Value c = rms ? a[0] : s.sub(a[0], a[2]);
      Value root = math::RsqrtOp::create(s.b, s.loc, s.add(a[1], s.cst(et, eps)));
      Value v = s.mul(c, root);
      size_t first = rms ? 2 : 3;
      for (size_t i = 0; i < extra.size(); ++i)
        v = i == 0 ? s.mul(v, a[first]) : s.add(v, a[first + i]);
      return v;
    });
  }
  if (!y)
    return fail(op, "uses one dim twice");
  vals[r] = y;
  return true;
}

bool Emitter::emitReduce(Operation *op, StringRef name) {
  Value x = op->getOperand(0), r = op->getResult(0), nx = get(x);
  if (!nx)
    return fail(op, "has an operand with no upstream form");
  SmallVector<int> kept = keysOf(r), red;
  for (int k : keysOf(x))
    if (!llvm::is_contained(kept, k))
      red.push_back(k);
  RankedTensorType type = f.factoredType(r);
  Type et = type.getElementType();
  bool isMax = name == "reduce_max", isMin = name == "reduce_min",
       isMean = name == "reduce_mean";
  if (!isMax && !isMin && !isMean && name != "reduce_sum")
    return fail(op, "has no upstream MLIR form yet");
  double init = isMax ? -INFINITY : isMin ? INFINITY : 0;
  double inv = 1.0 / double(product(f, red));
  Value v = generic({{nx, keysOf(x)}}, kept, type, init,
                    [&](Scalar &s, ValueRange a, const std::function<Value(int)> &) {
                      if (isMax)
                        return s.max(a[1], a[0]);
                      if (isMin)
                        return s.min(a[1], a[0]);
                      return s.add(a[1], isMean ? s.mul(a[0], s.cst(et, inv))
                                                : a[0]);
                    });
  if (!v)
    return fail(op, "uses one dim twice");
  vals[r] = v;
  return true;
}

/// An embedding lookup as a contraction over the vocabulary with a one-hot
/// row: out[i, h] = sum_v (ids[i] == v) * table[v, h], v from an iota
/// operand, so a table split on the vocabulary compares each shard's global
/// rows and the partial sums meet in an all-reduce, as Megatron's
/// vocabulary-parallel embedding does.
bool Emitter::emitGather(Operation *op) {
  Value table = op->getOperand(0), ids = op->getOperand(1),
        r = op->getResult(0);
  if (f.opIndex.count(op)) // one constant position: a one-hot contraction
    return emitMove(op, "gather");
  Value nt = get(table), ni = get(ids);
  if (!nt || !ni)
    return fail(op, "has an operand with no upstream form");
  SmallVector<int> rows = f.leavesOfDim(table, 0);
  if (rows.size() != 1)
    return fail(op, "has a table whose rows other ops factor");
  RankedTensorType type = f.factoredType(r);
  Type et = type.getElementType();
  int row = rows[0];
  Value rowIds = iota(f.size(row));
  Value v = generic(
      {{ni, keysOf(ids)}, {nt, keysOf(table)}, {rowIds, {row}}}, keysOf(r),
      type, 0.0,
      [&](Scalar &s, ValueRange a, const std::function<Value(int)> &) {
        Value id = s.convert(a[0], s.b.getI64Type());
        Value hit = arith::CmpIOp::create(s.b, s.loc, arith::CmpIPredicate::eq,
                                          id, a[2]);
        // A product, not a select of a constant: upstream's partitioner
        // crashes on a select of a value from outside the body (the
        // inliner's canonicalization hoists the constant there).
        Value one = arith::UIToFPOp::create(s.b, s.loc, et, hit);
        return s.add(a[3], s.mul(one, a[1]));
      });
  if (!v)
    return fail(op, "uses one dim twice");
  vals[r] = v;
  return true;
}

/// Attention as upstream writes it: scores = q . k over the head dim, a
/// masked softmax over the keys, then . v; dropout on the probabilities is
/// left out. The keys' length gets loops of its own (q and k often share
/// the sequence factor).
bool Emitter::emitAttention(Operation *op) {
  Value q = op->getOperand(0), k = op->getOperand(1), v = op->getOperand(2),
        r = op->getResult(0);
  Value nq = get(q), nk = get(k), nv = get(v);
  if (!nq || !nk || !nv)
    return fail(op, "has an operand with no upstream form");
  // [batch, heads, length, dim] or [batch x heads, length, dim].
  unsigned len = cast<RankedTensorType>(q.getType()).getRank() - 2;
  SmallVector<int> lengths;
  for (int l : f.leavesOfDim(k, len))
    lengths.push_back(freshKey(f.size(l)));
  auto withLengths = [&](Value x) {
    SmallVector<int> keys;
    for (unsigned d = 0; d < len; ++d)
      keys.append(f.leavesOfDim(x, d));
    keys.append(lengths);
    keys.append(f.leavesOfDim(x, len + 1));
    return keys;
  };
  SmallVector<int> rows, queries = f.leavesOfDim(q, len);
  for (unsigned d = 0; d < len; ++d)
    rows.append(f.leavesOfDim(q, d));
  rows.append(queries);
  SmallVector<int> scoreKeys(rows);
  scoreKeys.append(lengths);
  Type et = cast<RankedTensorType>(q.getType()).getElementType();
  RankedTensorType scoreType = typeOf(scoreKeys, et), rowType = typeOf(rows, et);
  bool causal = op->hasAttr("causal");
  auto windowAttr = op->getAttrOfType<IntegerAttr>("window");
  if (causal && (queries.size() != 1 || lengths.size() != 1))
    return fail(op, "masks a length that other ops factor");
  int64_t offset = op->getAttrOfType<IntegerAttr>("kv_len").getInt() -
                   op->getAttrOfType<IntegerAttr>("q_len").getInt();
  double scale = op->getAttrOfType<FloatAttr>("scale").getValueAsDouble();
  using Idx = const std::function<Value(int)> &;
  // True where key t is hidden from query s (bottom-right aligned, as
  // FlashAttention aligns a causal mask when the lengths differ); the
  // positions come from iota operands (see iota()).
  auto hidden = [&](Scalar &s, Value qPos, Value kPos) -> Value {
    if (!causal)
      return arith::ConstantIntOp::create(s.b, s.loc, 0, 1);
    Type i64 = s.b.getI64Type();
    Value last = s.add(qPos, s.cst(i64, double(offset)));
    Value after = arith::CmpIOp::create(s.b, s.loc, arith::CmpIPredicate::sgt,
                                        kPos, last);
    if (!windowAttr)
      return after;
    Value first = s.sub(last, s.cst(i64, double(windowAttr.getInt() - 1)));
    Value before = arith::CmpIOp::create(s.b, s.loc, arith::CmpIPredicate::slt,
                                         kPos, first);
    return arith::OrIOp::create(s.b, s.loc, after, before);
  };
  Value scores = generic({{nq, keysOf(q)}, {nk, withLengths(k)}}, scoreKeys,
                         scoreType, 0.0,
                         [](Scalar &s, ValueRange a, Idx) {
                           return s.add(a[2], s.mul(a[0], a[1]));
                         });
  if (!scores)
    return fail(op, "uses one dim twice");
  SmallVector<In> pos;
  if (causal)
    pos = {{iota(f.size(queries[0])), {queries[0]}},
           {iota(keySizes.lookup(lengths[0])), {lengths[0]}}};
  auto masked = [&](Scalar &s, ValueRange a, size_t at, Value keep,
                    Value otherwise) -> Value {
    if (!causal)
      return keep;
    return arith::SelectOp::create(s.b, s.loc, hidden(s, a[at], a[at + 1]),
                                   otherwise, keep);
  };
  SmallVector<In> mIns{{scores, scoreKeys}};
  mIns.append(pos);
  Value m = generic(mIns, rows, rowType, -INFINITY,
                    [&](Scalar &s, ValueRange a, Idx) {
                      Value x = s.mul(a[0], s.cst(et, scale));
                      return masked(s, a, 1, s.max(a.back(), x), a.back());
                    });
  SmallVector<In> eIns{{scores, scoreKeys}, {m, rows}};
  eIns.append(pos);
  Value e = generic(eIns, scoreKeys, scoreType, std::nullopt,
                    [&](Scalar &s, ValueRange a, Idx) {
                      Value x = s.sub(s.mul(a[0], s.cst(et, scale)), a[1]);
                      Value ex = math::ExpOp::create(s.b, s.loc, x);
                      return masked(s, a, 2, ex, s.cst(et, 0));
                    });
  Value l = generic({{e, scoreKeys}}, rows, rowType, 0.0,
                    [](Scalar &s, ValueRange a, Idx) { return s.add(a[1], a[0]); });
  RankedTensorType type = f.factoredType(r);
  Value out = generic({{e, scoreKeys}, {l, rows}, {nv, withLengths(v)}},
                      keysOf(r), type, 0.0,
                      [](Scalar &s, ValueRange a, Idx) {
                        return s.add(a[3], s.mul(s.div(a[0], a[1]), a[2]));
                      });
  if (!out)
    return fail(op, "uses one dim twice");
  vals[r] = out;
  return true;
}

/// RoPE: x . cos + rotate_half(x) . sin, rotate_half as a contraction of
/// the two halves with [[0, 1], [-1, 0]].
bool Emitter::emitRotary(Operation *op) {
  Value x = op->getOperand(0), c = op->getOperand(1), sn = op->getOperand(2),
        r = op->getResult(0);
  Value nx = get(x), nc = get(c), ns = get(sn);
  if (!nx || !nc || !ns)
    return fail(op, "has an operand with no upstream form");
  SmallVector<int> halves = f.leavesOfAtom(f.opAtom.lookup(op));
  if (halves.size() != 1)
    return fail(op, "rotates halves that other ops factor");
  int half = halves[0], other = freshKey(2);
  SmallVector<int> from = keysOf(x);
  llvm::replace(from, half, other);
  Type et = cast<RankedTensorType>(x.getType()).getElementType();
  // [[0, 1], [-1, 0]]: element [i][j] is j - i.
  Value rotation = indexed(RankedTensorType::get({2, 2}, et),
                           [](Scalar &s, ArrayRef<Value> at) -> Value {
                             return arith::SubIOp::create(s.b, s.loc, at[1], at[0]);
                           });
  RankedTensorType type = f.factoredType(r);
  using Idx = const std::function<Value(int)> &;
  Value rot = generic({{nx, from}, {rotation, {other, half}}}, keysOf(r), type,
                      0.0, [](Scalar &s, ValueRange a, Idx) {
                        return s.add(a[2], s.mul(a[0], a[1]));
                      });
  Value y = rot ? generic({{nx, keysOf(x)}, {nc, keysOf(c)}, {rot, keysOf(r)},
                           {ns, keysOf(sn)}},
                          keysOf(r), type, std::nullopt, [&](Scalar &s, ValueRange a, Idx) {
                            return s.add(s.mul(a[0], s.convert(a[1], et)),
                                         s.mul(a[2], s.convert(a[3], et)));
                          })
                : Value();
  if (!y)
    return fail(op, "uses one dim twice");
  vals[r] = y;
  return true;
}

} // namespace

OwningOpRef<ModuleOp> upstreamForm(ModuleOp module, std::string &error) {
  return Emitter(module, error).run();
}

} // namespace orrery
