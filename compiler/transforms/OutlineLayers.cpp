//===- OutlineLayers.cpp - outline repeated blocks as layer functions -----===//
//
// Example: GPT-3 175B imports as ~3,000 ops in @main. The signature of the
// first op of decoder layer 3 equals that of layer 4's first op, 31 ops
// later, and so on for 96 layers: period 31, count 96. The boundary phase
// is the one crossed by the fewest activations (the residual stream), so a
// layer starts at its first LayerNorm, not in the middle of attention. The
// result is @embedding ×1, @transformer_layer ×96, @head ×1.
//
//===----------------------------------------------------------------------===//

#include "orrery/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

namespace orrery {
#define GEN_PASS_DEF_OUTLINELAYERSPASS
#include "orrery/Transforms/Passes.h.inc"
} // namespace orrery

using namespace mlir;
using namespace orrery;

namespace {

/// How far a candidate search goes: the most frequent distances between
/// equal signatures.
constexpr size_t kMaxCandidatePeriods = 24;
/// How many earlier occurrences of a signature give candidate distances.
constexpr unsigned kRecentOccurrences = 8;

bool isValueOp(Operation *op) { return isa<WeightOp, ConstantOp, NoneOp>(op); }

bool isFloatTensor(Type t) {
  auto r = dyn_cast<RankedTensorType>(t);
  return r && isa<FloatType>(r.getElementType());
}

/// A Cast from one float type to another: all a layer that runs in another
/// precision adds.
bool isFloatCast(Operation *op) {
  return isa<CastOp>(op) && op->getNumOperands() == 1 &&
         isFloatTensor(op->getOperand(0).getType()) &&
         isFloatTensor(op->getResult(0).getType());
}

bool sameModuloFloat(Type a, Type b) {
  if (a == b)
    return true;
  auto x = dyn_cast<RankedTensorType>(a), y = dyn_cast<RankedTensorType>(b);
  return x && y && x.getShape() == y.getShape() &&
         isa<FloatType>(x.getElementType()) &&
         isa<FloatType>(y.getElementType());
}

/// Attributes equal but for float values within bf16's rounding (2^-8
/// relative): a scale folded from an fp16 constant is 0.12497 where the fp32
/// layers have 0.125.
bool sameAttrsModuloFloat(DictionaryAttr a, DictionaryAttr b) {
  if (a == b)
    return true;
  if (a.size() != b.size())
    return false;
  for (auto [x, y] : llvm::zip(a.getValue(), b.getValue())) {
    if (x.getName() != y.getName())
      return false;
    if (x.getValue() == y.getValue())
      continue;
    auto fx = dyn_cast<FloatAttr>(x.getValue()),
         fy = dyn_cast<FloatAttr>(y.getValue());
    if (!fx || !fy)
      return false;
    double u = fx.getValueAsDouble(), v = fy.getValueAsDouble();
    if (!(std::abs(u - v) <= std::ldexp(std::max(std::abs(u), std::abs(v)), -8)))
      return false;
  }
  return true;
}

/// The same op as `y` but for the float types of its values.
bool sameOpModuloFloat(Operation *x, Operation *y) {
  if (x->getName() != y->getName() ||
      !sameAttrsModuloFloat(x->getAttrDictionary(), y->getAttrDictionary()) ||
      x->getNumResults() != y->getNumResults() ||
      x->getNumOperands() != y->getNumOperands() ||
      x->getNumRegions() != 0 || y->getNumRegions() != 0)
    return false;
  for (unsigned i = 0; i < x->getNumResults(); ++i)
    if (!sameModuloFloat(x->getResult(i).getType(), y->getResult(i).getType()))
      return false;
  for (unsigned i = 0; i < x->getNumOperands(); ++i)
    if (!sameModuloFloat(x->getOperand(i).getType(),
                         y->getOperand(i).getType()) ||
        isWeight(x->getOperand(i)) != isWeight(y->getOperand(i)))
      return false;
  return true;
}

bool isContraction(Operation *op) {
  bool found = false;
  op->walk([&](Operation *inner) {
    if (isa<MatMulOp, GemmOp, ConvOp, ConvTransposeOp, LSTMOp, GRUOp, RNNOp>(
            inner))
      found = true;
  });
  return found;
}

/// An operand, as the dataflow of one instance sees it.
struct OperandCode {
  enum Kind : uint8_t { Internal, NestedInternal, External, Constant } kind;
  int64_t a = 0, b = 0;
  bool operator==(const OperandCode &o) const {
    return kind == o.kind && a == o.a && b == o.b;
  }
};

/// One instance of a block: its ops, the values it takes from outside (in
/// first-use order) and its dataflow in canonical form.
struct Instance {
  size_t start = 0, length = 0;
  SmallVector<Value> externals;
  SmallVector<bool> externalIsWeight;
  std::vector<OperandCode> codes;
  /// For each (op, result): used after the instance.
  std::vector<std::vector<bool>> usedOutside;
};

struct Segment {
  size_t start, length, kind;
};

/// A kind's exemplar: the kind it is a precision variant of, or none.
constexpr size_t kNoKind = ~size_t(0);

class Outliner {
public:
  Outliner(func::FuncOp main) : main(main), body(main.getBody().front()) {}
  LogicalResult run(ModuleOp module);

private:
  func::FuncOp main;
  Block &body;
  std::vector<Operation *> seq;
  std::vector<uint64_t> sigs;
  std::vector<bool> heavy;
  std::vector<int64_t> cutWidth;
  llvm::DenseMap<Operation *, size_t> position;
  std::vector<Segment> segments;
  std::vector<Instance> kindExemplar;
  std::vector<std::string> kindLabel;
  std::vector<size_t> kindVariantOf;

  uint64_t signature(Operation *op);
  void computeCutWidths();
  Instance canonicalize(size_t start, size_t length);
  bool sameShape(const Instance &a, const Instance &b);
  bool follows(const Instance &prev, const Instance &next);
  void search(size_t lo, size_t hi);
  std::string labelFor(const Instance &inst, bool repeated, size_t lo);
  std::optional<std::pair<size_t, size_t>>
  precisionVariant(const Instance &layer, size_t lo, size_t hi, bool before);
  size_t addKind(const Instance &exemplar, std::string label, size_t variantOf);
};

size_t Outliner::addKind(const Instance &exemplar, std::string label,
                         size_t variantOf) {
  kindExemplar.push_back(exemplar);
  kindLabel.push_back(std::move(label));
  kindVariantOf.push_back(variantOf);
  return kindExemplar.size() - 1;
}

// The stack's first (`before`) or last layer in another precision: an fp16
// export whose first layer upcasts the residual stream runs layer 0 in fp16
// and the rest in fp32 (Pythia), with float Casts where the precision
// changes. The ops of [lo, hi) next to the stack that are `layer`'s ops in
// the same order, modulo float types and with float Casts between them, are
// that layer: its own kind (priced at its own types), marked a variant of
// the stack's, instead of part of the embedding or the head. Returns the
// variant's [start, end).
std::optional<std::pair<size_t, size_t>>
Outliner::precisionVariant(const Instance &layer, size_t lo, size_t hi,
                           bool before) {
  std::vector<Operation *> want;
  for (size_t t = 0; t < layer.length; ++t)
    if (!isFloatCast(seq[layer.start + t]))
      want.push_back(seq[layer.start + t]);
  if (want.empty())
    return std::nullopt;
  size_t matched = 0, start = before ? hi : lo, end = start;
  bool differs = false;
  while (matched < want.size() && (before ? start > lo : end < hi)) {
    Operation *op = seq[before ? start - 1 : end];
    Operation *target =
        before ? want[want.size() - 1 - matched] : want[matched];
    if (isFloatCast(op)) {
      // Casts inside the layer only, not at its edges.
      if (matched == 0)
        return std::nullopt;
      differs = true;
    } else if (sameOpModuloFloat(op, target)) {
      differs |= op->getResultTypes() != target->getResultTypes() ||
                 op->getOperandTypes() != target->getOperandTypes() ||
                 op->getAttrDictionary() != target->getAttrDictionary();
      ++matched;
    } else {
      if (getenv("ORRERY_DEBUG_OUTLINE"))
        llvm::errs() << "variant stops at " << (before ? start - 1 : end)
                     << " after " << matched << " of " << want.size() << ": "
                     << *op << " vs " << *target << "\n";
      return std::nullopt;
    }
    before ? --start : ++end;
  }
  if (matched < want.size() || !differs)
    return std::nullopt;
  Instance variant = canonicalize(start, end - start);
  if (before ? !follows(variant, layer) : !follows(layer, variant))
    return std::nullopt;
  return std::make_pair(start, end);
}

uint64_t Outliner::signature(Operation *op) {
  llvm::hash_code h =
      llvm::hash_combine(op->getName().getAsOpaquePointer(),
                         op->getAttrDictionary().getAsOpaquePointer());
  for (Type t : op->getResultTypes())
    h = llvm::hash_combine(h, t.getAsOpaquePointer());
  for (Value v : op->getOperands()) {
    h = llvm::hash_combine(h, v.getType().getAsOpaquePointer());
    Operation *def = v.getDefiningOp();
    if (isa_and_nonnull<ConstantOp>(def))
      h = llvm::hash_combine(
          h, 2, cast<ConstantOp>(def).getValue().getAsOpaquePointer());
    else
      h = llvm::hash_combine(h, isWeight(v) ? 1 : 0);
  }
  // Bodies of control flow: names and types of their ops.
  op->walk([&](Operation *inner) {
    if (inner == op)
      return;
    h = llvm::hash_combine(h, inner->getName().getAsOpaquePointer());
    for (Type t : inner->getResultTypes())
      h = llvm::hash_combine(h, t.getAsOpaquePointer());
  });
  return h;
}

// cutWidth[i]: activations defined before seq[i] and used at or after it.
void Outliner::computeCutWidths() {
  size_t n = seq.size();
  std::vector<int64_t> delta(n + 2, 0);
  auto addRange = [&](int64_t def, int64_t lastUse) {
    // Live across boundaries def+1 .. lastUse.
    if (lastUse <= def)
      return;
    delta[def + 1] += 1;
    delta[lastUse + 1] -= 1;
  };
  auto lastUseOf = [&](Value v) -> int64_t {
    int64_t last = -1;
    for (Operation *user : v.getUsers()) {
      Operation *top = body.findAncestorOpInBlock(*user);
      if (!top)
        continue;
      auto it = position.find(top);
      last = std::max<int64_t>(
          last, it == position.end() ? int64_t(n) : int64_t(it->second));
    }
    return last;
  };
  for (BlockArgument arg : body.getArguments())
    addRange(-1 + 0, lastUseOf(arg)); // defined before seq[0]
  for (size_t i = 0; i < n; ++i)
    for (Value r : seq[i]->getResults())
      addRange(int64_t(i), lastUseOf(r));
  cutWidth.assign(n + 1, 0);
  int64_t running = 0;
  for (size_t i = 0; i <= n; ++i) {
    running += delta[i];
    cutWidth[i] = running;
  }
}

Instance Outliner::canonicalize(size_t start, size_t length) {
  Instance inst;
  inst.start = start;
  inst.length = length;
  llvm::DenseMap<Value, int64_t> externalIndex;
  auto inInstance = [&](Operation *top) {
    auto it = position.find(top);
    return it != position.end() && it->second >= start &&
           it->second < start + length;
  };
  for (size_t t = 0; t < length; ++t) {
    Operation *op = seq[start + t];
    op->walk<WalkOrder::PreOrder>([&](Operation *inner) {
      for (Value v : inner->getOperands()) {
        OperandCode code{OperandCode::External};
        Operation *def = v.getDefiningOp();
        Operation *defTop = def ? body.findAncestorOpInBlock(*def) : nullptr;
        bool argOfMain = !def && cast<BlockArgument>(v).getOwner() == &body;
        if (!def && !argOfMain) {
          code.kind = OperandCode::NestedInternal;
        } else if (defTop && inInstance(defTop)) {
          if (defTop == def) {
            code.kind = OperandCode::Internal;
            code.a = int64_t(position[def] - start);
            code.b = cast<OpResult>(v).getResultNumber();
          } else {
            code.kind = OperandCode::NestedInternal;
          }
        } else if (def && isa<ConstantOp, NoneOp>(def)) {
          code.kind = OperandCode::Constant;
          code.a = int64_t(reinterpret_cast<intptr_t>(
              def->getAttrDictionary().getAsOpaquePointer()));
          code.b = int64_t(
              reinterpret_cast<intptr_t>(v.getType().getAsOpaquePointer()));
        } else {
          auto [it, inserted] =
              externalIndex.try_emplace(v, inst.externals.size());
          if (inserted) {
            inst.externals.push_back(v);
            inst.externalIsWeight.push_back(isWeight(v));
          }
          code.a = it->second;
        }
        inst.codes.push_back(code);
      }
    });
    std::vector<bool> outside;
    for (Value r : op->getResults()) {
      bool used = false;
      for (Operation *user : r.getUsers()) {
        Operation *top = body.findAncestorOpInBlock(*user);
        if (!top || !inInstance(top))
          used = true;
      }
      outside.push_back(used);
    }
    inst.usedOutside.push_back(std::move(outside));
  }
  return inst;
}

bool Outliner::sameShape(const Instance &a, const Instance &b) {
  if (a.length != b.length || a.codes != b.codes ||
      a.externalIsWeight != b.externalIsWeight)
    return false;
  // Signatures are hashes: compare the ops themselves too.
  for (size_t t = 0; t < a.length; ++t) {
    Operation *x = seq[a.start + t], *y = seq[b.start + t];
    if (x->getName() != y->getName() ||
        x->getAttrDictionary() != y->getAttrDictionary() ||
        x->getResultTypes() != y->getResultTypes() ||
        x->getOperandTypes() != y->getOperandTypes())
      return false;
  }
  return true;
}

// Layers of a stack form a chain: each instance consumes something the
// previous one produced. Parallel branches (Inception, a ResNet shortcut
// beside its main path) repeat too, but are not layers.
bool Outliner::follows(const Instance &prev, const Instance &next) {
  for (Value v : next.externals) {
    Operation *def = v.getDefiningOp();
    Operation *top = def ? body.findAncestorOpInBlock(*def) : nullptr;
    auto it = top ? position.find(top) : position.end();
    if (it != position.end() && it->second >= prev.start &&
        it->second < prev.start + prev.length)
      return true;
  }
  return false;
}

std::string Outliner::labelFor(const Instance &inst, bool repeated, size_t lo) {
  bool softmax = false, contraction = false, conv = false, recurrent = false,
       embedding = false;
  for (size_t t = 0; t < inst.length; ++t)
    seq[inst.start + t]->walk([&](Operation *op) {
      softmax |= isa<SoftmaxOp, FusedAttentionOp>(op);
      contraction |= isa<MatMulOp, GemmOp>(op);
      conv |= isa<ConvOp, ConvTransposeOp>(op);
      recurrent |= isa<LSTMOp, GRUOp, RNNOp>(op);
      if (auto g = dyn_cast<GatherOp>(op))
        embedding |= g->getNumOperands() > 0 && isWeight(g->getOperand(0));
    });
  if (repeated) {
    if (softmax && contraction)
      return "transformer_layer";
    if (recurrent)
      return "recurrent_block";
    if (conv)
      return "conv_block";
    if (contraction)
      return "mlp_block";
    return "block";
  }
  if (lo == 0)
    return embedding ? "embedding" : "stem";
  if (inst.start + inst.length == seq.size())
    return "head";
  return embedding ? "embedding" : "transition";
}

void Outliner::search(size_t lo, size_t hi) {
  if (lo >= hi)
    return;
  // Candidate periods: the most frequent distances between equal
  // signatures, to each of the last kRecentOccurrences ones: a block of
  // several unlike layers (Llama 4's three RoPE layers and one without)
  // repeats at a distance no op spans to its last occurrence.
  std::map<size_t, int64_t> gapCount;
  llvm::DenseMap<uint64_t, llvm::SmallVector<size_t, kRecentOccurrences>>
      recent;
  for (size_t i = lo; i < hi; ++i) {
    auto &seen = recent[sigs[i]];
    for (size_t j : seen)
      gapCount[i - j]++;
    if (seen.size() == kRecentOccurrences)
      seen.erase(seen.begin());
    seen.push_back(i);
  }
  std::vector<std::pair<int64_t, size_t>> periods;
  for (auto [gap, count] : gapCount)
    periods.push_back({count, gap});
  std::sort(periods.begin(), periods.end(), [](auto &x, auto &y) {
    return x.first != y.first ? x.first > y.first : x.second < y.second;
  });
  if (periods.size() > kMaxCandidatePeriods)
    periods.resize(kMaxCandidatePeriods);

  struct Candidate {
    size_t period, phase, count;
  };
  std::vector<Candidate> candidates;
  for (auto [freq, p] : periods) {
    size_t k = lo;
    while (k + p < hi) {
      if (sigs[k] != sigs[k + p]) {
        ++k;
        continue;
      }
      size_t a = k;
      while (k + p < hi && sigs[k] == sigs[k + p])
        ++k;
      size_t b = k; // sigs[j] == sigs[j+p] for j in [a, b)
      if (b - a < p)
        continue;
      Candidate best{p, 0, 0};
      for (size_t phi = a; phi < a + p && phi <= b; ++phi) {
        size_t count = (b - phi) / p + 1;
        if (count < 2)
          break;
        bool hasHeavy = false;
        for (size_t t = phi; t < phi + p && !hasHeavy; ++t)
          hasHeavy = heavy[t];
        if (!hasHeavy)
          continue;
        bool better =
            count > best.count ||
            (count == best.count && cutWidth[phi] <= cutWidth[best.phase]);
        if (better)
          best = {p, phi, count};
      }
      if (best.count >= 2)
        candidates.push_back(best);
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate &x, const Candidate &y) {
                     size_t sx = x.period * x.count, sy = y.period * y.count;
                     if (sx != sy)
                       return sx > sy;
                     if (x.period != y.period)
                       return x.period < y.period;
                     return x.phase < y.phase;
                   });
  for (const Candidate &c : candidates) {
    Instance first = canonicalize(c.phase, c.period);
    std::vector<Instance> instances = {first};
    for (size_t j = 1; j < c.count; ++j) {
      Instance next = canonicalize(c.phase + j * c.period, c.period);
      if (!sameShape(first, next) || !follows(instances.back(), next))
        break;
      instances.push_back(std::move(next));
    }
    if (instances.size() < 2)
      continue;
    size_t begin = c.phase, end = c.phase + instances.size() * c.period;
    auto before = precisionVariant(instances.front(), lo, begin, true);
    auto after = precisionVariant(instances.back(), end, hi, false);
    search(lo, before ? before->first : begin);
    // Outputs: the union over instances of results used after them.
    for (const Instance &inst : instances)
      for (size_t t = 0; t < inst.usedOutside.size(); ++t)
        for (size_t r = 0; r < inst.usedOutside[t].size(); ++r)
          if (inst.usedOutside[t][r])
            instances[0].usedOutside[t][r] = true;
    std::string label = labelFor(instances[0], true, c.phase);
    size_t kind = addKind(instances[0], label, kNoKind);
    for (const Instance &inst : instances)
      segments.push_back({inst.start, inst.length, kind});
    for (auto variant : {before, after})
      if (variant) {
        size_t length = variant->second - variant->first;
        size_t v = addKind(canonicalize(variant->first, length), label, kind);
        segments.push_back({variant->first, length, v});
      }
    search(after ? after->second : end, hi);
    return;
  }
  // Nothing repeats here: one layer of its own.
  Instance inst = canonicalize(lo, hi - lo);
  size_t kind = addKind(inst, labelFor(inst, false, lo), kNoKind);
  segments.push_back({lo, hi - lo, kind});
}

// Gives each user of a shared view op (Transpose, Reshape, ...) its own copy.
// Exporters share one transpose of the encoder output among all decoder
// layers; with a copy per layer every layer looks the same. Views cost no
// FLOPs and frameworks implement them as strides, so the copies are free.
void rematerializeSharedViews(Block &body) {
  std::vector<Operation *> ops;
  for (Operation &op : body.without_terminator())
    ops.push_back(&op);
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
    Operation *op = *it;
    if (!isa<TransposeOp, ReshapeOp, UnsqueezeOp, SqueezeOp, FlattenOp,
             ExpandOp, IdentityOp, SliceOp>(op) ||
        op->getNumResults() != 1)
      continue;
    SmallVector<OpOperand *> uses;
    for (OpOperand &use : op->getResult(0).getUses())
      uses.push_back(&use);
    if (uses.size() < 2)
      continue;
    // Only users of one op kind are repeats that each need a copy (every
    // decoder layer's key and value projections); a view read by ops of
    // different kinds (a block's conv and its residual add) is one block's.
    OperationName userKind = uses.front()->getOwner()->getName();
    if (llvm::any_of(uses, [&](OpOperand *u) {
          return u->getOwner()->getName() != userKind;
        }))
      continue;
    // Every user gets a copy right before it; the original goes.
    for (OpOperand *use : uses) {
      Operation *top = body.findAncestorOpInBlock(*use->getOwner());
      if (!top)
        continue;
      OpBuilder b(top);
      use->set(b.clone(*op)->getResult(0));
    }
    if (op->use_empty())
      op->erase();
  }
}

// Puts @main's ops in a canonical topological order, so that exporters'
// habits do not hide a repeat. What every layer shares is computed before
// the first layer, however the exporter placed it:
//   - ops computed from constants alone (a causal mask built once and
//     unsqueezed per layer);
//   - side computations: ops computed from the graph's other inputs (an
//     attention mask, position ids) without the first input's data and
//     without a contraction or an embedding lookup of their own;
//   - weight-derived values that reach more than one op (rotary tables from
//     an inv_freq buffer, a weight shared by every layer transposed once).
// Other ops computed from weights alone (a weight transpose) come right
// before their first user; every other op keeps its place.
void canonicalizeOrder(Block &body) {
  enum class Source { Constant, Weight, Side, Activation };
  llvm::DenseMap<Operation *, Source> source;
  std::vector<Operation *> original;
  for (Operation &op : body.without_terminator())
    original.push_back(&op);
  auto definingTop = [&](Value v) -> Operation * {
    Operation *def = v.getDefiningOp();
    return def ? body.findAncestorOpInBlock(*def) : nullptr;
  };
  auto sourceOf = [&](Value v) {
    if (auto arg = dyn_cast<BlockArgument>(v))
      return arg.getOwner() == &body && arg.getArgNumber() > 0
                 ? Source::Side
                 : Source::Activation;
    Operation *def = definingTop(v);
    auto it = def ? source.find(def) : source.end();
    return it == source.end() ? Source::Activation : it->second;
  };
  for (Operation *op : original) {
    if (isa<ConstantOp, NoneOp>(op)) {
      source[op] = Source::Constant;
      continue;
    }
    if (isa<WeightOp>(op)) {
      source[op] = Source::Weight;
      continue;
    }
    Source s = op->getNumOperands() && !op->getNumRegions()
                   ? Source::Constant
                   : Source::Activation;
    op->walk([&](Operation *inner) {
      for (Value v : inner->getOperands()) {
        Operation *def = definingTop(v);
        if (def == op)
          continue;
        s = std::max(s, sourceOf(v));
      }
    });
    // A contraction or an embedding lookup is a layer's own work, even on
    // a side input (a decoder's token ids).
    bool own = isContraction(op) ||
               (isa<GatherOp>(op) && isWeight(op->getOperand(0)));
    if (s == Source::Side && own)
      s = Source::Activation;
    source[op] = s;
  }
  // Weight-derived ops whose values reach two or more other ops.
  llvm::DenseMap<Operation *, llvm::SmallVector<Operation *, 2>> reach;
  for (auto it = original.rbegin(); it != original.rend(); ++it) {
    Operation *op = *it;
    if (source[op] != Source::Weight || isa<WeightOp>(op))
      continue;
    llvm::SmallVector<Operation *, 2> &r = reach[op];
    auto add = [&](Operation *x) {
      if (r.size() < 2 && !llvm::is_contained(r, x))
        r.push_back(x);
    };
    for (Operation *user : op->getUsers()) {
      Operation *top = body.findAncestorOpInBlock(*user);
      if (!top || top == op)
        continue;
      if (source[top] == Source::Weight && reach.count(top))
        for (Operation *x : reach[top])
          add(x);
      else
        add(top);
    }
  }
  auto shared = [&](Operation *op) {
    Source s = source[op];
    return s == Source::Side ||
           (s == Source::Weight && reach.count(op) && reach[op].size() >= 2);
  };
  llvm::SmallPtrSet<Operation *, 32> emitted;
  std::vector<Operation *> order;
  auto emit = [&](Operation *op) {
    emitted.insert(op);
    order.push_back(op);
  };
  for (Operation *op : original)
    if (isValueOp(op) || source[op] == Source::Constant)
      emit(op);
  // Emits the weight-derived ops `op` needs, depth first, then `op`.
  auto pull = [&](Operation *root) {
    std::vector<std::pair<Operation *, bool>> stack = {{root, false}};
    while (!stack.empty()) {
      // (Not a structured binding: lambdas capture those only in C++20.)
      Operation *op = stack.back().first;
      bool expanded = stack.back().second;
      stack.pop_back();
      if (emitted.count(op))
        continue;
      if (expanded) {
        emit(op);
        continue;
      }
      stack.push_back({op, true});
      op->walk([&](Operation *inner) {
        for (Value v : inner->getOperands())
          if (Operation *def = definingTop(v); def && def != op &&
                                               !emitted.count(def) &&
                                               source[def] == Source::Weight)
            stack.push_back({def, false});
      });
    }
  };
  for (Operation *op : original)
    if (!emitted.count(op) && shared(op))
      pull(op);
  for (Operation *op : original)
    if (!emitted.count(op) && source[op] == Source::Activation)
      pull(op);
  for (Operation *op : original) // weight-derived ops nobody uses
    if (!emitted.count(op))
      emit(op);
  Operation *terminator = body.getTerminator();
  for (Operation *op : order)
    op->moveBefore(terminator);
}

LogicalResult Outliner::run(ModuleOp module) {
  rematerializeSharedViews(body);
  canonicalizeOrder(body);
  for (Operation &op : body.without_terminator())
    if (!isValueOp(&op)) {
      position[&op] = seq.size();
      seq.push_back(&op);
    }
  if (seq.empty())
    return success();
  for (Operation *op : seq) {
    sigs.push_back(signature(op));
    heavy.push_back(isContraction(op));
  }
  computeCutWidths();
  if (getenv("ORRERY_DEBUG_OUTLINE"))
    for (size_t i = 0; i < seq.size(); ++i)
      llvm::errs() << i << " " << seq[i]->getName() << " "
                   << seq[i]->getResultTypes() << " w" << cutWidth[i] << "\n";
  search(0, seq.size());
  std::sort(
      segments.begin(), segments.end(),
      [](const Segment &a, const Segment &b) { return a.start < b.start; });

  // Canonical forms of every instance, taken before the IR changes.
  std::vector<Instance> segmentInstances;
  for (const Segment &s : segments)
    segmentInstances.push_back(canonicalize(s.start, s.length));

  // One function per kind, built from its first instance.
  SymbolTable symbols(module);
  OpBuilder builder(module.getContext());
  std::vector<func::FuncOp> funcs(kindExemplar.size());
  std::vector<SmallVector<std::pair<size_t, unsigned>>> outputs(
      kindExemplar.size());
  for (size_t k = 0; k < kindExemplar.size(); ++k) {
    const Instance &inst = kindExemplar[k];
    SmallVector<Type> argTypes, resultTypes;
    for (Value v : inst.externals)
      argTypes.push_back(v.getType());
    for (size_t t = 0; t < inst.length; ++t)
      for (unsigned r = 0; r < inst.usedOutside[t].size(); ++r)
        if (inst.usedOutside[t][r]) {
          outputs[k].push_back({t, r});
          resultTypes.push_back(seq[inst.start + t]->getResult(r).getType());
        }
    builder.setInsertionPointToEnd(module.getBody());
    auto func =
        func::FuncOp::create(builder, main.getLoc(), kindLabel[k],
                             builder.getFunctionType(argTypes, resultTypes));
    func.setPrivate();
    symbols.insert(func); // renames on a clash: transformer_layer_0, ...
    if (kindVariantOf[k] != kNoKind) // its base kind's function comes first
      func->setAttr("orrery.variant_of",
                    FlatSymbolRefAttr::get(funcs[kindVariantOf[k]]));
    Block *entry = func.addEntryBlock();
    IRMapping map;
    for (size_t i = 0; i < inst.externals.size(); ++i) {
      map.map(inst.externals[i], entry->getArgument(i));
      if (inst.externalIsWeight[i]) {
        bool trainable = false;
        if (auto w = inst.externals[i].getDefiningOp<WeightOp>())
          trainable = w.getTrainable();
        func.setArgAttr(i, "orrery.weight", builder.getBoolAttr(trainable));
      }
    }
    builder.setInsertionPointToStart(entry);
    for (size_t t = 0; t < inst.length; ++t) {
      Operation *op = seq[inst.start + t];
      op->walk([&](Operation *inner) {
        for (Value v : inner->getOperands()) {
          Operation *def = v.getDefiningOp();
          if (def && isa<ConstantOp, NoneOp>(def) && def->getBlock() == &body &&
              !map.contains(v))
            map.map(v, builder.clone(*def)->getResult(0));
        }
      });
      builder.clone(*op, map);
    }
    SmallVector<Value> results;
    for (auto [t, r] : outputs[k])
      results.push_back(map.lookup(seq[inst.start + t]->getResult(r)));
    func::ReturnOp::create(builder, main.getLoc(), results);
    funcs[k] = func;
  }

  // Replace every instance by a call. Externals captured above may be
  // outputs of instances already replaced: `replaced` maps them to the
  // results of the calls that took their place.
  llvm::DenseMap<Value, Value> replaced;
  for (size_t si = 0; si < segments.size(); ++si) {
    const Segment &s = segments[si];
    const Instance &inst = segmentInstances[si];
    SmallVector<Value> args;
    for (Value v : inst.externals)
      args.push_back(replaced.lookup(v) ? replaced.lookup(v) : v);
    Operation *lastOp = seq[s.start + s.length - 1];
    builder.setInsertionPointAfter(lastOp);
    auto call =
        func::CallOp::create(builder, lastOp->getLoc(), funcs[s.kind], args);
    for (size_t i = 0; i < outputs[s.kind].size(); ++i) {
      auto [t, r] = outputs[s.kind][i];
      Value old = seq[s.start + t]->getResult(r);
      old.replaceAllUsesWith(call.getResult(i));
      replaced[old] = call.getResult(i);
    }
    for (size_t t = s.length; t-- > 0;) {
      Operation *op = seq[s.start + t];
      op->dropAllUses();
      op->erase();
    }
  }
  // Constants and nones left without users in @main.
  for (Operation &op : llvm::make_early_inc_range(body.without_terminator()))
    if (isa<ConstantOp, NoneOp>(op) && op.use_empty())
      op.erase();
  return success();
}

struct OutlineLayersPass
    : orrery::impl::OutlineLayersPassBase<OutlineLayersPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main || main.isExternal()) {
      module.emitError("no function @main to outline");
      return signalPassFailure();
    }
    if (!main.getBody().hasOneBlock()) {
      main.emitError("@main must have a single block");
      return signalPassFailure();
    }
    if (failed(Outliner(main).run(module)))
      signalPassFailure();
  }
};

} // namespace
