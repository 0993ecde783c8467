//===- DimFactors.cpp - the dimensions a module's reshapes leave intact ---===//
#include "orrery/Transforms/DimFactors.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/StringSet.h"

#include <optional>

using namespace mlir;

namespace orrery {

int DimFactors::find(int a) const {
  while (atoms[a].parent != a) {
    atoms[a].parent = atoms[atoms[a].parent].parent;
    a = atoms[a].parent;
  }
  return a;
}

int DimFactors::newAtom(int64_t size) {
  atoms.push_back({size, int(atoms.size()), {}});
  return int(atoms.size()) - 1;
}

void DimFactors::appendLeaves(int a, SmallVector<int> &out) const {
  int r = find(a);
  if (atoms[r].children.empty()) {
    out.push_back(r);
    return;
  }
  for (int c : SmallVector<int>(atoms[r].children))
    appendLeaves(c, out);
}

SmallVector<int> DimFactors::dimsOf(Value v) {
  auto it = dims.find(v);
  if (it != dims.end())
    return it->second;
  SmallVector<int> ds;
  if (auto t = dyn_cast<RankedTensorType>(v.getType()))
    for (int64_t s : t.getShape())
      ds.push_back(newAtom(s));
  return dims[v] = ds;
}

bool DimFactors::unify(ArrayRef<int> a, ArrayRef<int> b) {
  auto expand = [&](ArrayRef<int> ds) {
    SmallVector<int> all, big;
    for (int d : ds)
      appendLeaves(d, all);
    for (int l : all)
      if (atoms[l].size != 1)
        big.push_back(l);
    return big;
  };
  SmallVector<int> la = expand(a), lb = expand(b);
  // Replaces list[i] by the leaves of its (now split) atom.
  auto refresh = [&](SmallVector<int> &list, size_t i) {
    SmallVector<int> sub;
    appendLeaves(list[i], sub);
    list.erase(list.begin() + i);
    list.insert(list.begin() + i, sub.begin(), sub.end());
  };
  auto split = [&](int atom, int64_t first) {
    int64_t rest = atoms[atom].size / first;
    int c0 = newAtom(first), c1 = newAtom(rest);
    atoms[atom].children = {c0, c1};
  };
  size_t i = 0, j = 0;
  while (i < la.size() && j < lb.size()) {
    int x = find(la[i]), y = find(lb[j]);
    if (!atoms[x].children.empty()) {
      refresh(la, i);
      continue;
    }
    if (!atoms[y].children.empty()) {
      refresh(lb, j);
      continue;
    }
    int64_t sx = atoms[x].size, sy = atoms[y].size;
    if (x == y || sx == sy) {
      atoms[y].parent = x;
      ++i, ++j;
    } else if (sx > sy) {
      if (sx % sy)
        return false;
      split(x, sy);
    } else {
      if (sy % sx)
        return false;
      split(y, sx);
    }
  }
  return i == la.size() && j == lb.size();
}

bool DimFactors::unifyBroadcast(Value x, Value r) {
  auto tx = dyn_cast<RankedTensorType>(x.getType());
  auto tr = dyn_cast<RankedTensorType>(r.getType());
  if (!tx || !tr || tx.getRank() > tr.getRank())
    return !tx || !tr ? true : false;
  int64_t off = tr.getRank() - tx.getRank();
  for (int64_t d = 0; d < tx.getRank(); ++d) {
    int64_t sx = tx.getDimSize(d), sr = tr.getDimSize(d + off);
    if (sx == 1)
      continue;
    if (sx != sr || !unifyDim(x, d, r, d + off))
      return false;
  }
  return true;
}

SmallVector<int> DimFactors::leavesOfDim(Value v, unsigned d) {
  return leavesOfAtom(dimsOf(v)[d]);
}

SmallVector<int> DimFactors::leavesOfAtom(int atom) {
  SmallVector<int> all, out;
  appendLeaves(atom, all);
  for (int l : all)
    if (atoms[l].size != 1)
      out.push_back(find(l));
  return out;
}

SmallVector<int> DimFactors::leaves(Value v) {
  SmallVector<int> out;
  for (unsigned d = 0; d < dimsOf(v).size(); ++d)
    out.append(leavesOfDim(v, d));
  return out;
}

RankedTensorType DimFactors::factoredType(Value v) {
  SmallVector<int64_t> shape;
  for (int l : leaves(v))
    shape.push_back(atoms[l].size);
  return RankedTensorType::get(
      shape, cast<RankedTensorType>(v.getType()).getElementType());
}

bool DimFactors::isHeads(int factor) const {
  for (int h : heads) {
    SmallVector<int> ls;
    appendLeaves(h, ls);
    if (!ls.empty() && find(ls.front()) == find(factor))
      return true;
  }
  return false;
}

static int64_t rankOf(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t ? t.getRank() : -1;
}

static int64_t intAttr(Operation *op, StringRef name, int64_t dflt) {
  auto a = op->getAttrOfType<IntegerAttr>(name);
  return a ? a.getInt() : dflt;
}

/// The integers of an orrery.constant, or nothing.
static std::optional<SmallVector<int64_t>> constantInts(Value v) {
  Operation *def = v.getDefiningOp();
  if (!def || def->getName().getStringRef() != "orrery.constant")
    return std::nullopt;
  auto value = def->getAttrOfType<DenseIntElementsAttr>("value");
  if (!value)
    return std::nullopt;
  SmallVector<int64_t> out;
  for (const APInt &x : value)
    out.push_back(x.getSExtValue());
  return out;
}

/// Ops that work element by element with NumPy broadcasting.
static bool isElementwise(StringRef name) {
  static const llvm::StringSet<> set = {
      "abs",        "neg",  "relu",  "sigmoid",  "tanh",
      "erf",        "gelu", "exp",   "log",      "sqrt",
      "reciprocal", "sin",  "cos",   "identity", "cast",
      "add",        "sub",  "mul",   "div",      "pow",
      "max",        "min",  "where", "dropout",  "gated_activation",
      "softplus"};
  return set.contains(name);
}

/// Why `op` has no upstream form, named by the op, into `error`; false.
static bool refuse(Operation *op, const std::string &why, std::string &error) {
  error = op->getName().getStringRef().str() + " " + why;
  return false;
}

bool DimFactors::unifyContraction(Operation *op, std::string &error) {
  auto bad = [&](const std::string &why) { return refuse(op, why, error); };
  StringRef name = op->getName().getStringRef();
  name.consume_front("orrery.");
  Value r = op->getResult(0);
  int64_t rr = rankOf(r);
  if (name == "matmul") {
    Value a = op->getOperand(0), b = op->getOperand(1);
    int64_t ra = rankOf(a), rb = rankOf(b);
    if (ra < 2 || rb < 2)
      return bad("has a vector operand (no upstream form here)");
    bool ok = unifyDim(a, ra - 1, b, rb - 2) &&
              unifyDim(r, rr - 2, a, ra - 2) && unifyDim(r, rr - 1, b, rb - 1);
    for (Value x : {a, b}) {
      auto t = cast<RankedTensorType>(x.getType());
      for (int64_t d = 0; ok && d + 2 < t.getRank(); ++d) {
        int64_t dr = d + rr - t.getRank();
        if (t.getDimSize(d) != 1)
          ok = t.getDimSize(d) ==
                   cast<RankedTensorType>(r.getType()).getDimSize(dr) &&
               unifyDim(x, d, r, dr);
      }
    }
    return ok || bad("multiplies dims that do not factor alike");
  }
  if (name == "gemm") {
    Value a = op->getOperand(0), b = op->getOperand(1);
    if (rankOf(a) != 2 || rankOf(b) != 2)
      return bad("is not two-dimensional");
    int ta = intAttr(op, "transA", 0), tb = intAttr(op, "transB", 0);
    bool ok = unifyDim(a, ta ? 0 : 1, b, tb ? 1 : 0) &&
              unifyDim(r, 0, a, ta ? 1 : 0) && unifyDim(r, 1, b, tb ? 0 : 1);
    if (op->getNumOperands() > 2 && rankOf(op->getOperand(2)) >= 0)
      ok = ok && unifyBroadcast(op->getOperand(2), r);
    return ok || bad("multiplies dims that do not factor alike");
  }
  return bad("has no upstream MLIR form here");
}

bool DimFactors::unifyParts(Operation *op, std::string &error) {
  auto bad = [&](const std::string &why) { return refuse(op, why, error); };
  StringRef name = op->getName().getStringRef();
  name.consume_front("orrery.");
  Value r = op->getResult(0);
  bool isSplit = name == "split";
  SmallVector<Value> parts;
  Value whole = isSplit ? op->getOperand(0) : r;
  if (isSplit)
    parts.append(op->result_begin(), op->result_end());
  else
    parts.append(op->operand_begin(), op->operand_end());
  int64_t axis = intAttr(op, "axis", 0);
  if (axis < 0)
    axis += rankOf(whole);
  auto partType = cast<RankedTensorType>(parts[0].getType());
  for (Value p : parts)
    if (p.getType() != partType)
      return bad("has parts of unequal sizes (no upstream form)");
  int piece = newAtom(int64_t(parts.size()));
  opAtom[op] = piece;
  if (!unify({dimsOf(whole)[axis]}, {piece, dimsOf(parts[0])[axis]}))
    return bad("cuts a dim that does not factor");
  for (Value p : parts)
    for (int64_t d = 0; d < rankOf(whole); ++d)
      if (!unifyDim(p, d, d == axis ? parts[0] : whole, d))
        return bad("has parts that do not factor alike");
  return true;
}

bool DimFactors::unifyReduce(Operation *op, std::string &error) {
  auto bad = [&](const std::string &why) { return refuse(op, why, error); };
  Value r = op->getResult(0);
  auto axes = op->getAttrOfType<DenseI64ArrayAttr>("axes");
  Value x = op->getOperand(0);
  if (!axes || op->getNumOperands() > 1)
    return bad("takes its axes as an operand (no upstream form here)");
  bool keep = intAttr(op, "keepdims", 1);
  int64_t out = 0;
  for (int64_t d = 0; d < rankOf(x); ++d) {
    bool reduced = llvm::any_of(axes.asArrayRef(), [&](int64_t a) {
      return (a < 0 ? a + rankOf(x) : a) == d;
    });
    if (!reduced && !unifyDim(x, d, r, out))
      return bad("keeps dims that do not factor alike");
    out += !reduced || keep;
  }
  return true;
}

bool DimFactors::unifyGather(Operation *op, std::string &error) {
  auto bad = [&](const std::string &why) { return refuse(op, why, error); };
  Value r = op->getResult(0);
  Value table = op->getOperand(0), ids = op->getOperand(1);
  int64_t axis = intAttr(op, "axis", 0);
  if (axis < 0)
    axis += rankOf(table);
  // One constant position along any axis (BERT's and ViT's first token):
  // the axis is the part, the gather one part of it.
  std::optional<SmallVector<int64_t>> at = constantInts(ids);
  if (rankOf(ids) == 0 && at && at->size() == 1) {
    int64_t n = cast<RankedTensorType>(table.getType()).getDimSize(axis);
    int64_t i = (*at)[0] < 0 ? (*at)[0] + n : (*at)[0];
    if (i < 0 || i >= n)
      return bad("takes a position outside its axis");
    opAtom[op] = dimsOf(table)[axis];
    opIndex[op] = i;
    for (int64_t d = 0, o = 0; d < rankOf(table); ++d)
      if (d != axis && !unifyDim(table, d, r, o++))
        return bad("keeps dims that do not factor alike");
    return true;
  }
  if (axis != 0)
    return bad("gathers along an axis other than 0 (no upstream form here)");
  int64_t ri = rankOf(ids);
  for (int64_t d = 0; d < ri; ++d)
    if (!unifyDim(ids, d, r, d))
      return bad("has indices that do not factor alike");
  for (int64_t d = 1; d < rankOf(table); ++d)
    if (!unifyDim(table, d, r, ri + d - 1))
      return bad("has rows that do not factor alike");
  return true;
}

bool DimFactors::unifyAttention(Operation *op, std::string &error) {
  auto bad = [&](const std::string &why) { return refuse(op, why, error); };
  Value r = op->getResult(0);
  int64_t rr = rankOf(r);
  Value q = op->getOperand(0), k = op->getOperand(1), v = op->getOperand(2);
  int64_t h = intAttr(op, "heads", 0), kv = intAttr(op, "kv_heads", 0),
          b = intAttr(op, "batch", 0);
  // [batch, heads, length, dim], or torch.nn.MultiheadAttention's
  // [batch x heads, length, dim] (heads == kv_heads).
  auto shapeIs = [&](Value x, int64_t heads, StringRef len, StringRef dim) {
    auto t = cast<RankedTensorType>(x.getType());
    if (t.getRank() == 4)
      return t.getDimSize(0) == b && t.getDimSize(1) == heads &&
             t.getDimSize(2) == intAttr(op, len, -1) &&
             t.getDimSize(3) == intAttr(op, dim, -1);
    return t.getRank() == 3 && h == kv && t.getDimSize(0) == b * heads &&
           t.getDimSize(1) == intAttr(op, len, -1) &&
           t.getDimSize(2) == intAttr(op, dim, -1);
  };
  int64_t rank = rankOf(q);
  if (op->getNumOperands() > 3 || kv <= 0 || h % kv || rankOf(k) != rank ||
      rankOf(v) != rank || rr != rank || !shapeIs(q, h, "q_len", "head_dim") ||
      !shapeIs(k, kv, "kv_len", "head_dim") ||
      !shapeIs(v, kv, "kv_len", "value_dim") ||
      !shapeIs(r, h, "q_len", "value_dim"))
    return bad("is neither [batch, heads, length, dim] nor [batch x heads, "
               "length, dim] without a bias (no upstream form here)");
  int64_t len = rank - 2, dim = rank - 1;
  bool ok = unifyDim(q, 0, k, 0) && unifyDim(q, 0, v, 0) &&
            unifyDim(q, 0, r, 0) && unifyDim(q, len, r, len) &&
            unifyDim(k, len, v, len) && unifyDim(q, dim, k, dim) &&
            unifyDim(v, dim, r, dim);
  if (rank == 4) {
    int group = newAtom(h / kv);
    opAtom[op] = group;
    markHeads(dimsOf(k)[1]);
    ok = ok && unifyDim(q, 1, r, 1) && unifyDim(k, 1, v, 1) &&
         unify({dimsOf(q)[1]}, {dimsOf(k)[1], group});
  }
  return ok || bad("has operands that do not factor alike");
}

bool DimFactors::unifyOp(Operation *op, std::string &error) {
  StringRef full = op->getName().getStringRef(), name = full;
  name.consume_front("orrery.");
  auto bad = [&](const std::string &why) {
    error = full.str() + " " + why;
    return false;
  };
  if (isa<shard::ShardingOp, shard::GridOp, func::ReturnOp>(op) ||
      name == "constant" || name == "weight" || name == "none")
    return true;
  if (isa<shard::ShardOp>(op))
    return unify(dimsOf(op->getOperand(0)), dimsOf(op->getResult(0))) ||
           bad("changes its operand's shape");
  if (auto call = dyn_cast<func::CallOp>(op)) {
    auto callee = op->getParentOfType<ModuleOp>().lookupSymbol<func::FuncOp>(
        call.getCallee());
    if (!callee || callee.isExternal())
      return bad("calls a function without a body");
    auto ret = cast<func::ReturnOp>(callee.getBody().back().getTerminator());
    for (auto [x, a] : llvm::zip(call.getOperands(), callee.getArguments()))
      if (!unify(dimsOf(x), dimsOf(a)))
        return bad("passes a value of another shape");
    for (auto [r, x] : llvm::zip(call.getResults(), ret.getOperands()))
      if (!unify(dimsOf(r), dimsOf(x)))
        return bad("returns a value of another shape");
    return true;
  }
  if (op->getNumResults() == 0 || rankOf(op->getResult(0)) < 0)
    return bad("has no upstream MLIR form here");
  Value r = op->getResult(0);
  int64_t rr = rankOf(r);

  if (isElementwise(name)) {
    for (Value x : op->getOperands())
      if (rankOf(x) >= 0 && !unifyBroadcast(x, r))
        return bad("broadcasts in a way upstream MLIR cannot express");
    return true;
  }
  if (name == "matmul" || name == "gemm")
    return unifyContraction(op, error);
  if (name == "slice")
    return unifySlice(op, error);
  if (name == "expand")
    return unifyBroadcast(op->getOperand(0), r) ||
           bad("broadcasts in a way upstream MLIR cannot express");
  if (name == "reshape" || name == "squeeze" || name == "unsqueeze" ||
      name == "flatten")
    return unify(dimsOf(op->getOperand(0)), dimsOf(r)) ||
           bad("reshapes dims that no common factoring covers");
  if (name == "transpose") {
    auto perm = op->getAttrOfType<DenseI64ArrayAttr>("perm");
    Value x = op->getOperand(0);
    for (int64_t i = 0; i < rr; ++i)
      if (!unifyDim(r, i, x, perm ? perm[i] : rr - 1 - i))
        return bad("permutes dims that do not factor alike");
    return true;
  }
  if (name == "split" || name == "concat")
    return unifyParts(op, error);
  if (name == "layer_normalization" || name == "rms_normalization" ||
      name == "softmax" || name == "log_softmax") {
    if (!unify(dimsOf(op->getOperand(0)), dimsOf(r)))
      return bad("changes its input's shape");
    for (Value x : llvm::drop_begin(op->getOperands()))
      if (rankOf(x) >= 0 && !unifyBroadcast(x, r))
        return bad("has a scale that does not broadcast");
    return true;
  }
  if (name.starts_with("reduce_"))
    return unifyReduce(op, error);
  if (name == "gather")
    return unifyGather(op, error);
  if (name == "fused_attention")
    return unifyAttention(op, error);
  if (name == "rotary_embedding") {
    Value x = op->getOperand(0);
    int64_t d = cast<RankedTensorType>(x.getType()).getShape().back();
    if (d % 2)
      return bad("rotates an odd dim");
    int half = newAtom(2);
    opAtom[op] = half;
    bool ok = unify(dimsOf(x), dimsOf(r)) &&
              unify({dimsOf(x).back()}, {half, newAtom(d / 2)}) &&
              unifyBroadcast(op->getOperand(1), r) &&
              unifyBroadcast(op->getOperand(2), r);
    return ok || bad("has tables that do not factor alike");
  }
  return bad("has no upstream MLIR form yet");
}

/// A slice of constant bounds, unit steps, that takes the whole of every
/// dim but one, and of that one an equal part at a multiple of its length
/// (torch.nn.MultiheadAttention's q, k, v of its fused projection): that
/// dim factors as [parts, part], the slice one part.
bool DimFactors::unifySlice(Operation *op, std::string &error) {
  auto bad = [&](const std::string &why) {
    error = "orrery.slice " + why;
    return false;
  };
  Value x = op->getOperand(0), r = op->getResult(0);
  auto t = cast<RankedTensorType>(x.getType());
  int64_t rank = t.getRank();
  std::optional<SmallVector<int64_t>> starts, ends, axes, steps;
  if (op->getNumOperands() < 3 || !(starts = constantInts(op->getOperand(1))) ||
      !(ends = constantInts(op->getOperand(2))))
    return bad("has bounds that are not constants (no upstream form)");
  axes = op->getNumOperands() > 3
             ? constantInts(op->getOperand(3))
             : std::optional<SmallVector<int64_t>>(SmallVector<int64_t>());
  steps = op->getNumOperands() > 4
              ? constantInts(op->getOperand(4))
              : std::optional<SmallVector<int64_t>>(SmallVector<int64_t>());
  if (!axes || !steps || llvm::any_of(*steps, [](int64_t s) { return s != 1; }))
    return bad("has axes that are not constants or steps other than 1");
  if (axes->empty())
    for (int64_t d = 0; d < int64_t(starts->size()); ++d)
      axes->push_back(d);
  if (axes->size() != starts->size() || ends->size() != starts->size())
    return bad("has bounds for another number of axes");
  bool cut = false;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t n = t.getDimSize(d), start = 0, end = n;
    for (size_t i = 0; i < axes->size(); ++i)
      if (((*axes)[i] < 0 ? (*axes)[i] + rank : (*axes)[i]) == d) {
        start = (*starts)[i] < 0 ? (*starts)[i] + n : (*starts)[i];
        end = (*ends)[i] < 0 ? (*ends)[i] + n : std::min((*ends)[i], n);
      }
    int64_t len = end - start;
    if (len == n) {
      if (!unifyDim(x, d, r, d))
        return bad("keeps dims that do not factor alike");
      continue;
    }
    if (cut || len <= 0 || start < 0 || n % len || start % len)
      return bad("takes other than one equal part of one dim (no upstream "
                 "form)");
    cut = true;
    int parts = newAtom(n / len);
    opAtom[op] = parts;
    opIndex[op] = start / len;
    if (!unify({dimsOf(x)[d]}, {parts, dimsOf(r)[d]}))
      return bad("cuts a dim that does not factor");
  }
  return true;
}

bool DimFactors::build(ModuleOp module, std::string &error) {
  WalkResult walk = module.walk([&](Operation *op) {
    if (isa<ModuleOp, func::FuncOp>(op))
      return WalkResult::advance();
    for (Type t : op->getResultTypes())
      if (auto rt = dyn_cast<RankedTensorType>(t); rt && !rt.hasStaticShape()) {
        error =
            op->getName().getStringRef().str() + " has a dim no --dim binds";
        return WalkResult::interrupt();
      }
    return unifyOp(op, error) ? WalkResult::advance() : WalkResult::interrupt();
  });
  return !walk.wasInterrupted();
}

} // namespace orrery
