//===- FineTuning.cpp - which weights of each layer train ----------------===//
#include "FineTuning.h"

#include "orrery/Dialect/OrreryDialect.h"
#include "orrery/Workload/Parallelism.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <map>
#include <set>

using namespace mlir;

namespace orrery {

bool LayerTraining::trains() const {
  return std::any_of(args.begin(), args.end(),
                     [](char a) { return a == Trains || a == Adapted; });
}

std::string LayerTraining::key() const {
  if (!active)
    return "";
  // Only a layer that runs no backward prices its missing input gradient.
  return std::string(args.begin(), args.end()) + (noBackward() ? "-b" : "");
}

/// '*' matches any run of characters, everything else itself.
static bool glob(llvm::StringRef p, llvm::StringRef s) {
  while (!p.empty()) {
    if (p.front() == '*') {
      p = p.drop_while([](char c) { return c == '*'; });
      if (p.empty())
        return true;
      for (size_t i = 0; i <= s.size(); ++i)
        if (glob(p, s.drop_front(i)))
          return true;
      return false;
    }
    if (s.empty() || p.front() != s.front())
      return false;
    p = p.drop_front();
    s = s.drop_front();
  }
  return s.empty();
}

/// A pattern names a weight, a dotted prefix of its name, or a dotted run
/// inside it ("q_proj" in "model.layers.0.self_attn.q_proj.weight").
static bool matchesName(const std::string &pattern, llvm::StringRef name) {
  return glob(pattern, name) || glob(pattern + ".*", name) ||
         glob("*." + pattern, name) || glob("*." + pattern + ".*", name);
}

namespace {
/// The 2-D weights of a layer function's linear layers (by argument), and
/// of those the projections into and out of its attention.
struct Roles {
  llvm::DenseSet<unsigned> linear, attention;
  llvm::DenseSet<unsigned> experts; ///< [E, d, f] expert weights
};
} // namespace

static bool isWeighted(Operation *op) {
  return isContractionOp(op) && hasWeightOperand(op);
}

/// The attention core: a fused attention, or a product of two activations
/// (the unfused scores QKᵀ and their product with V).
static bool isAttentionCore(Operation *op) {
  return isa<FusedAttentionOp>(op) ||
         (isContractionOp(op) && llvm::count_if(op->getOperands(),
                                                isActivation) >= 2);
}

static Roles rolesOf(func::FuncOp f) {
  Roles r;
  Block &body = f.getBody().front();
  for (Operation &op : body.without_terminator()) {
    if (!isWeighted(&op))
      continue;
    llvm::SmallVector<unsigned> args;
    for (Value v : op.getOperands()) {
      bool swapped;
      BlockArgument a = weightSource(v, swapped);
      auto t = a ? dyn_cast<RankedTensorType>(a.getType()) : nullptr;
      if (a && a.getOwner() == &body && t && t.getRank() == 2)
        args.push_back(a.getArgNumber());
      if (a && a.getOwner() == &body && t && t.getRank() == 3)
        r.experts.insert(a.getArgNumber());
    }
    if (args.empty())
      continue;
    // Into the attention: its result reaches the core before another
    // linear layer; out of it: its input comes from the core.
    bool attention = false;
    llvm::SmallVector<Value> work(op.getResults().begin(),
                                  op.getResults().end());
    llvm::DenseSet<Operation *> seen;
    while (!work.empty() && !attention) {
      Value v = work.pop_back_val();
      for (Operation *user : v.getUsers()) {
        if (!seen.insert(user).second || user->hasTrait<OpTrait::IsTerminator>())
          continue;
        if (isAttentionCore(user)) {
          attention = true;
          break;
        }
        if (!isWeighted(user))
          work.append(user->getResults().begin(), user->getResults().end());
      }
    }
    seen.clear();
    for (Value v : op.getOperands())
      if (isActivation(v))
        work.push_back(v);
    while (!work.empty() && !attention) {
      Operation *def = work.pop_back_val().getDefiningOp();
      if (!def || !seen.insert(def).second)
        continue;
      if (isAttentionCore(def)) {
        attention = true;
        break;
      }
      if (!isWeighted(def))
        work.append(def->getOperands().begin(), def->getOperands().end());
    }
    for (unsigned a : args) {
      r.linear.insert(a);
      if (attention)
        r.attention.insert(a);
    }
  }
  return r;
}

llvm::Expected<std::vector<LayerTraining>>
layerTraining(ModuleOp module, func::FuncOp main, const FineTuning &ft) {
  std::vector<func::CallOp> calls;
  for (Operation &op : main.getBody().front())
    if (auto call = dyn_cast<func::CallOp>(op))
      calls.push_back(call);
  std::vector<LayerTraining> out(calls.size());
  if (!ft.active())
    return out;
  auto err = [](const std::string &msg) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
  };
  bool lora = ft.loraRank > 0;
  for (const std::string &t : ft.loraTargets)
    if (t.empty())
      return err("--lora: an empty target");
  std::set<std::string> matchedFreeze, matchedTarget;
  std::map<std::string, Roles> roles;
  bool before = false; // some earlier layer trains
  for (size_t i = 0; i < calls.size(); ++i) {
    func::CallOp call = calls[i];
    std::string callee = call.getCallee().str();
    auto fn = module.lookupSymbol<func::FuncOp>(call.getCallee());
    if (!fn)
      continue; // buildWorkload names it
    auto [it, fresh] = roles.try_emplace(callee);
    if (fresh)
      it->second = rolesOf(fn);
    const Roles &role = it->second;
    bool last = i + 1 == calls.size();
    LayerTraining &t = out[i];
    t.active = true;
    for (auto [j, v] : llvm::enumerate(call.getOperands())) {
      auto weight = v.getDefiningOp<WeightOp>();
      if (!weight) {
        t.args.push_back(LayerTraining::NotWeight);
        continue;
      }
      if (!weight.getTrainable()) {
        t.args.push_back(LayerTraining::Buffer);
        continue;
      }
      llvm::StringRef name = weight.getName();
      bool frozen = lora;
      for (const std::string &p : ft.freeze)
        if (p == callee || matchesName(p, name)) {
          frozen = true;
          matchedFreeze.insert(p);
        }
      bool adapted = false;
      if (lora && role.linear.contains(unsigned(j)))
        for (const std::string &target : ft.loraTargets) {
          bool hit =
              target == "attention"  ? role.attention.contains(unsigned(j))
              : target == "mlp"      ? !role.attention.empty() &&
                                      !role.attention.contains(unsigned(j))
              : target == "all-linear" ? !last
                                       : matchesName(target, name);
          if (hit) {
            adapted = true;
            matchedTarget.insert(target);
          }
        }
      t.args.push_back(adapted  ? LayerTraining::Adapted
                       : frozen ? LayerTraining::Frozen
                                : LayerTraining::Trains);
    }
    // A mixture-of-experts layer's experts train together or not at all.
    int expertStates = 0;
    for (unsigned j : role.experts)
      if (j < t.args.size())
        expertStates |= t.args[j] == LayerTraining::Trains ? 1 : 2;
    if (expertStates == 3)
      return err("--freeze: freezes some of the expert weights of @" + callee +
                 " but not the others; freeze all of a mixture-of-experts "
                 "layer's expert weights or none");
    t.needsInputGradient = before;
    before |= t.trains();
  }
  for (const std::string &p : ft.freeze)
    if (!matchedFreeze.count(p))
      return err("--freeze " + p +
                 ": matches no trainable weight (by name, a dotted prefix "
                 "or a part of one; '*' for any run) and no layer kind");
  for (const std::string &t : ft.loraTargets)
    if (!matchedTarget.count(t))
      return err("--lora targets=" + t + ": matches no linear layer's weight" +
                 std::string(t == "attention" || t == "mlp"
                                 ? " (the model has no attention the "
                                   "fusion pass or its scores show)"
                                 : ""));
  if (!before)
    return err(std::string(lora ? "--lora" : "--freeze") +
               ": no weight trains (every trainable weight is frozen)");
  return out;
}

LayerTraining::Arg weightTraining(Operation *op, const LayerTraining &t) {
  if (!t.active)
    return LayerTraining::Trains;
  for (Value v : op->getOperands()) {
    bool swapped;
    BlockArgument a = weightSource(v, swapped);
    if (!a || a.getArgNumber() >= t.args.size())
      continue;
    char kind = t.args[a.getArgNumber()];
    if (kind == LayerTraining::Frozen || kind == LayerTraining::Adapted)
      return LayerTraining::Arg(kind);
  }
  return LayerTraining::Trains;
}

void freezeContraction(OpCost &c, int64_t weightBytes, bool inputGradient) {
  if (!inputGradient) {
    c.backwardFlops = 0;
    c.backwardBytes = 0;
    c.backwardKernels = 0;
    c.tpAllReduceBackwardBytes = 0;
    return;
  }
  // dX = dY · Wᵀ: the forward's FLOPs; no weight gradient.
  c.backwardFlops = c.forwardFlops;
  c.backwardBytes = c.outputBytes + weightBytes + c.activationInputBytes;
  c.backwardKernels = 1;
}

void addLoraAdapter(LayerKind &kind, const OpCost &base, int rank, int split) {
  int64_t rows = std::max<int64_t>(1, base.gemmBatch) * base.gemmM;
  int64_t k = base.gemmK, n = base.gemmN, r = rank;
  int64_t e = std::max<int64_t>(1, base.outputBytes / std::max<int64_t>(1, rows * n));
  auto gemm = [&](const char *name, int64_t kk, int64_t nn, bool splitOp) {
    OpCost g;
    g.name = std::string("lora:") + name;
    g.contraction = g.weighted = true;
    g.kernelClass = base.kernelClass;
    g.forwardFlops = 2 * rows * kk * nn;
    g.backwardFlops = 2 * g.forwardFlops; // input and weight gradients
    g.bytesRead = (rows * kk + kk * nn) * e;
    g.bytesWritten = rows * nn * e;
    g.activationInputBytes = rows * kk * e;
    g.outputBytes = rows * nn * e;
    g.gemmBatch = 1;
    g.gemmM = rows;
    g.gemmK = kk;
    g.gemmN = nn;
    g.tensorParallel = splitOp;
    return g;
  };
  // A takes the base's input (split with it under a row-parallel base), B
  // gives its output (split under a column-parallel one); the product is
  // scaled (alpha / rank) and added to the base's result before the base's
  // all-reduce, so adapters add no tensor-parallel collective.
  OpCost a = gemm("a", k, r, split == 2), b = gemm("b", r, n, split == 1);
  OpCost scale, add;
  scale.name = "lora:scale";
  scale.forwardFlops = rows * n;
  scale.backwardFlops = rows * n;
  scale.bytesRead = scale.bytesWritten = rows * n * e;
  scale.backwardBytes = 2 * rows * n * e;
  scale.backwardKernels = 1;
  scale.tensorParallel = split == 1;
  add.name = "lora:add";
  add.forwardFlops = rows * n;
  add.bytesRead = 2 * rows * n * e;
  add.bytesWritten = rows * n * e;
  add.backwardBytes = 0; // the gradient passes to both terms as it is
  add.backwardKernels = 0;
  add.tensorParallel = split == 1;
  for (const OpCost *op : {&a, &b, &scale, &add}) {
    kind.forwardFlops += op->forwardFlops;
    kind.backwardFlops += op->backwardFlops;
    kind.bytesRead += op->bytesRead;
    kind.bytesWritten += op->bytesWritten;
    kind.ops.push_back(*op);
  }
  // A's input is the base's (kept for it, Adapted); B keeps x·A.
  kind.savedReplicatedBytes += rows * r * e;
  kind.savedActivationBytes += rows * r * e;
  int64_t pa = k * r, pb = r * n;
  kind.parameters += pa + pb;
  kind.adapterParameters += pa + pb;
  kind.replicatedParameters += split == 1 ? pa : split == 2 ? pb : pa + pb;
  kind.weightTensors += 2;
}

} // namespace orrery
