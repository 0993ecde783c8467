//===- OrreryCost.cpp - cost formulas and verifiers of orrery ops --------===//
//
// Each formula is the one stated in the op's ODS description. Counts use
// int64_t: a 405B-parameter model at batch 16K and sequence 8K is ~1e20
// FLOPs per step, but a single op of one micro-batch stays far below 2^63.
//
//===----------------------------------------------------------------------===//

#include "orrery/Dialect/OrreryDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace orrery;

int64_t orrery::numElements(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  return tensor.getNumElements();
}

int64_t orrery::tensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return 0;
  int64_t bits = tensor.getElementType().getIntOrFloatBitWidth();
  if (bits >= 8)
    return satMul(numElements(type), (bits + 7) / 8);
  // Sub-byte types (int4, fp4) pack; a bool still takes a byte.
  if (bits == 1)
    return numElements(type);
  return (satMul(numElements(type), bits) + 7) / 8;
}

bool orrery::isWeight(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
    return func && func.getArgAttr(arg.getArgNumber(), "orrery.weight");
  }
  return isa_and_nonnull<WeightOp>(value.getDefiningOp());
}

/// How far back isActivation looks for data. Values computed from weights
/// and constants alone (a transposed weight, a causal mask) sit a few ops
/// from their sources; an activation reaches an activation operand at once
/// and the search stops there.
static constexpr int kMaxDerivationDepth = 8;

static bool dependsOnData(Value value, int depth) {
  if (isWeight(value))
    return false;
  Operation *def = value.getDefiningOp();
  if (!def)
    return true; // an input of the graph or of a body
  if (isa<WeightOp, ConstantOp, NoneOp>(def) || def->getNumOperands() == 0)
    return false;
  if (depth == 0)
    return true;
  return llvm::any_of(def->getOperands(),
                      [&](Value v) { return dependsOnData(v, depth - 1); });
}

bool orrery::isActivation(Value value) {
  return isa<RankedTensorType>(value.getType()) &&
         dependsOnData(value, kMaxDerivationDepth);
}

static int64_t firstResultElements(Operation *op) {
  return op->getNumResults() ? numElements(op->getResult(0).getType()) : 0;
}

static int64_t operandElements(Operation *op, unsigned i) {
  return i < op->getNumOperands() ? numElements(op->getOperand(i).getType())
                                  : 0;
}

static ArrayRef<int64_t> shapeOf(Value v) {
  if (auto t = dyn_cast<RankedTensorType>(v.getType()))
    return t.getShape();
  return {};
}

static int64_t intAttr(Operation *op, StringRef name, int64_t dflt) {
  if (auto attr = op->getAttrOfType<IntegerAttr>(name))
    return attr.getInt();
  return dflt;
}

static bool hasOperand(Operation *op, unsigned i) {
  return i < op->getNumOperands() &&
         isa<RankedTensorType>(op->getOperand(i).getType());
}

//===----------------------------------------------------------------------===//
// Defaults.
//===----------------------------------------------------------------------===//

int64_t orrery::detail::defaultForwardFlops(Operation *) { return 0; }

int64_t orrery::detail::defaultBackwardFlops(Operation *op) {
  return cast<CostOpInterface>(op).getForwardFlops();
}

int64_t orrery::detail::defaultBytesRead(Operation *op) {
  int64_t bytes = 0;
  for (Value v : op->getOperands())
    bytes = satAdd(bytes, tensorBytes(v.getType()));
  return bytes;
}

int64_t orrery::detail::defaultBytesWritten(Operation *op) {
  int64_t bytes = 0;
  for (Value v : op->getResults())
    bytes = satAdd(bytes, tensorBytes(v.getType()));
  return bytes;
}

void orrery::detail::defaultSavedForBackward(Operation *,
                                             SmallVectorImpl<Value> &) {}

int64_t orrery::detail::perOutputElementFlops(Operation *op, int64_t flops) {
  return satMul(flops, firstResultElements(op));
}

int64_t orrery::detail::inputElementFlops(Operation *op) {
  return operandElements(op, 0);
}

int64_t orrery::detail::poolFlops(Operation *op) {
  int64_t window = 1;
  if (auto kernel = op->getAttrOfType<DenseI64ArrayAttr>("kernel_shape"))
    for (int64_t k : kernel.asArrayRef())
      window = satMul(window, k);
  return satMul(window, firstResultElements(op));
}

void orrery::detail::saveActivationOperands(Operation *op,
                                            SmallVectorImpl<Value> &saved) {
  for (Value v : op->getOperands())
    if (isActivation(v))
      saved.push_back(v);
}

void orrery::detail::saveNonConstantPairOperands(
    Operation *op, SmallVectorImpl<Value> &saved) {
  // x * c needs nothing of x for its gradient when c is a constant; x * w
  // and x * y need each activation operand.
  bool anyConstant = llvm::any_of(op->getOperands(), [](Value v) {
    return isa_and_nonnull<ConstantOp>(v.getDefiningOp());
  });
  if (!anyConstant)
    saveActivationOperands(op, saved);
}

void orrery::detail::saveFirstOperand(Operation *op,
                                      SmallVectorImpl<Value> &saved) {
  if (op->getNumOperands() && isActivation(op->getOperand(0)))
    saved.push_back(op->getOperand(0));
}

// ONNX LSTM/GRU/RNN: X [seq, batch, input], W [dirs, gates·H, input],
// R [dirs, gates·H, H].
int64_t orrery::detail::recurrentFlops(Operation *op, int64_t gates,
                                       bool backward) {
  ArrayRef<int64_t> x = shapeOf(op->getOperand(0));
  ArrayRef<int64_t> w = shapeOf(op->getOperand(1));
  if (x.size() != 3 || w.size() != 3 || gates == 0)
    return 0;
  int64_t seq = x[0], batch = x[1], input = x[2];
  int64_t dirs = w[0], hidden = w[1] / gates;
  if (intAttr(op, "layout", 0) == 1)
    std::swap(seq, batch);
  int64_t projections = satMul(gates, 2, hidden, satAdd(input, hidden));
  int64_t elementwise = satMul(gates, 4, hidden);
  int64_t perStep =
      satAdd(backward ? satMul(2, projections) : projections, elementwise);
  return satMul(seq, dirs, batch, perStep);
}

int64_t orrery::detail::recurrentGateBytes(Operation *op, int64_t gates) {
  ArrayRef<int64_t> x = shapeOf(op->getOperand(0));
  ArrayRef<int64_t> w = shapeOf(op->getOperand(1));
  if (x.size() != 3 || w.size() != 3)
    return 0;
  auto type = cast<RankedTensorType>(op->getOperand(0).getType());
  int64_t elemBytes =
      std::max<int64_t>(1, type.getElementType().getIntOrFloatBitWidth() / 8);
  // Every step keeps its gate activations and its hidden (and cell) state.
  return satMul(x[0], x[1], w[0], w[1] + 2 * (w[1] / gates), elemBytes);
}

int64_t CostOpInterface::getSavedActivationBytes() {
  SmallVector<Value> saved;
  getSavedForBackward(saved);
  int64_t bytes = getExtraSavedBytes();
  llvm::SmallPtrSet<void *, 8> seen;
  for (Value v : saved)
    if (seen.insert(v.getAsOpaquePointer()).second)
      bytes = satAdd(bytes, tensorBytes(v.getType()));
  return bytes;
}

//===----------------------------------------------------------------------===//
// Verifiers.
//===----------------------------------------------------------------------===//

LogicalResult orrery::detail::verifyArity(Operation *op, int minIn, int maxIn,
                                          int minOut, int maxOut) {
  int in = op->getNumOperands(), out = op->getNumResults();
  if (in < minIn || (maxIn >= 0 && in > maxIn))
    return op->emitOpError()
           << "takes " << minIn << " to "
           << (maxIn < 0 ? std::string("any number of") : std::to_string(maxIn))
           << " operands, got " << in;
  if (out < minOut || (maxOut >= 0 && out > maxOut))
    return op->emitOpError() << "gives " << minOut << " to "
                             << (maxOut < 0 ? std::string("any number of")
                                            : std::to_string(maxOut))
                             << " results, got " << out;
  return success();
}

LogicalResult orrery::detail::verifyBroadcast(Operation *op) {
  // NumPy broadcasting: aligned from the right, each pair equal or one is 1.
  SmallVector<int64_t> result;
  for (Value v : op->getOperands()) {
    ArrayRef<int64_t> s = shapeOf(v);
    if (s.size() > result.size())
      result.insert(result.begin(), s.size() - result.size(), 1);
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t &r = result[result.size() - s.size() + i];
      if (r == 1)
        r = s[i];
      else if (s[i] != 1 && s[i] != r)
        return op->emitOpError()
               << "operand shapes do not broadcast: dimension "
               << (result.size() - s.size() + i) << " is " << r << " and "
               << s[i];
    }
  }
  return success();
}

LogicalResult orrery::detail::verifyMatMul(Operation *op) {
  ArrayRef<int64_t> a = shapeOf(op->getOperand(0)),
                    b = shapeOf(op->getOperand(1));
  if (a.empty() || b.empty())
    return op->emitOpError() << "operands must be ranked tensors of rank >= 1";
  int64_t k1 = a.back(), k2 = b.size() == 1 ? b[0] : b[b.size() - 2];
  if (k1 != k2)
    return op->emitOpError()
           << "contraction dimensions differ: " << k1 << " vs " << k2;
  return success();
}

LogicalResult orrery::detail::verifyConv(Operation *op) {
  ArrayRef<int64_t> x = shapeOf(op->getOperand(0)),
                    w = shapeOf(op->getOperand(1));
  if (x.size() < 3 || w.size() != x.size())
    return op->emitOpError() << "input and weight must have the same rank >= 3";
  int64_t group = intAttr(op, "group", 1);
  if (group <= 0 || x[1] != w[1] * group)
    return op->emitOpError()
           << "input channels " << x[1] << " differ from weight channels "
           << w[1] << " times group " << group;
  return success();
}

//===----------------------------------------------------------------------===//
// Op-specific formulas.
//===----------------------------------------------------------------------===//

int64_t ClipOp::getForwardFlops() {
  return orrery::detail::perOutputElementFlops(*this, 2);
}
void ClipOp::getSavedForBackward(SmallVectorImpl<Value> &saved) {
  orrery::detail::saveFirstOperand(*this, saved);
}

int64_t MatMulOp::getForwardFlops() {
  ArrayRef<int64_t> a = shapeOf(getOperand(0));
  if (a.empty())
    return 0;
  // Output elements already span the broadcast batch, M and N.
  return satMul(2, a.back(), orrery::detail::perOutputElementFlops(*this, 1));
}
int64_t MatMulOp::getBackwardFlops() { return satMul(2, getForwardFlops()); }
void MatMulOp::getSavedForBackward(SmallVectorImpl<Value> &saved) {
  orrery::detail::saveActivationOperands(*this, saved);
}

int64_t GemmOp::getForwardFlops() {
  ArrayRef<int64_t> a = shapeOf(getOperand(0));
  if (a.size() != 2)
    return 0;
  int64_t k = intAttr(*this, "transA", 0) ? a[0] : a[1];
  int64_t mn = orrery::detail::perOutputElementFlops(*this, 1);
  return satAdd(satMul(2, k, mn), hasOperand(*this, 2) ? mn : 0);
}
int64_t GemmOp::getBackwardFlops() {
  ArrayRef<int64_t> a = shapeOf(getOperand(0));
  if (a.size() != 2)
    return 0;
  int64_t k = intAttr(*this, "transA", 0) ? a[0] : a[1];
  return satMul(4, k, orrery::detail::perOutputElementFlops(*this, 1));
}
void GemmOp::getSavedForBackward(SmallVectorImpl<Value> &saved) {
  for (unsigned i = 0; i < 2; ++i)
    if (isActivation(getOperand(i)))
      saved.push_back(getOperand(i));
}

static int64_t convContractionFlops(Operation *op, bool transposed) {
  ArrayRef<int64_t> w = shapeOf(op->getOperand(1));
  if (w.size() < 3)
    return 0;
  int64_t window = 1;
  for (int64_t k : w.drop_front(2))
    window = satMul(window, k);
  if (!transposed) // W: [C_out, C_in/group, k...]; per output element.
    return satMul(2, w[1], window, firstResultElements(op));
  // W: [C_in, C_out/group, k...]; per input element.
  return satMul(2, w[1], window, operandElements(op, 0));
}

int64_t ConvOp::getForwardFlops() {
  return convContractionFlops(*this, false) +
         (hasOperand(*this, 2) ? firstResultElements(*this) : 0);
}
int64_t ConvOp::getBackwardFlops() {
  return satMul(2, convContractionFlops(*this, false));
}
void ConvOp::getSavedForBackward(SmallVectorImpl<Value> &saved) {
  orrery::detail::saveFirstOperand(*this, saved);
}

int64_t ConvTransposeOp::getForwardFlops() {
  return convContractionFlops(*this, true) +
         (hasOperand(*this, 2) ? firstResultElements(*this) : 0);
}
int64_t ConvTransposeOp::getBackwardFlops() {
  return satMul(2, convContractionFlops(*this, true));
}
void ConvTransposeOp::getSavedForBackward(SmallVectorImpl<Value> &saved) {
  orrery::detail::saveFirstOperand(*this, saved);
}

#define ORRERY_NORM_COST(OP, FLOPS)                                            \
  int64_t OP::getForwardFlops() {                                              \
    return orrery::detail::perOutputElementFlops(*this, FLOPS);                \
  }                                                                            \
  void OP::getSavedForBackward(SmallVectorImpl<Value> &saved) {                \
    orrery::detail::saveFirstOperand(*this, saved);                            \
  }
ORRERY_NORM_COST(BatchNormalizationOp, 8)
ORRERY_NORM_COST(LayerNormalizationOp, 8)
ORRERY_NORM_COST(InstanceNormalizationOp, 8)
ORRERY_NORM_COST(LRNOp, 2 * intAttr(*this, "size", 5) + 4)
#undef ORRERY_NORM_COST

int64_t SoftmaxOp::getForwardFlops() {
  return orrery::detail::perOutputElementFlops(*this, 5);
}
void SoftmaxOp::getSavedForBackward(SmallVectorImpl<Value> &saved) {
  saved.push_back(getResult(0));
}
int64_t LogSoftmaxOp::getForwardFlops() {
  return orrery::detail::perOutputElementFlops(*this, 5);
}
void LogSoftmaxOp::getSavedForBackward(SmallVectorImpl<Value> &saved) {
  saved.push_back(getResult(0));
}

int64_t DropoutOp::getForwardFlops() {
  return orrery::detail::perOutputElementFlops(*this, 1);
}
int64_t DropoutOp::getExtraSavedBytes() { return firstResultElements(*this); }

int64_t ResizeOp::getForwardFlops() {
  auto mode = (*this)->getAttrOfType<StringAttr>("mode");
  int64_t rank = shapeOf(getOperand(0)).size();
  int64_t perElement = 1;
  if (mode && mode.getValue() == "linear")
    perElement = 4 * rank;
  else if (mode && mode.getValue() == "cubic")
    perElement = 16 * rank;
  return orrery::detail::perOutputElementFlops(*this, perElement);
}

int64_t WeightOp::getParameterCount() {
  return getTrainable() ? numElements(getType()) : 0;
}

// Values without computation move no bytes of their own.
int64_t WeightOp::getBytesWritten() { return 0; }
int64_t ConstantOp::getBytesWritten() { return 0; }
int64_t NoneOp::getBytesWritten() { return 0; }

int64_t OnnxOp::getForwardFlops() { return 0; }
int64_t OnnxOp::getBackwardFlops() { return 0; }

//===----------------------------------------------------------------------===//
// Control flow: costs summarized from the bodies.
//===----------------------------------------------------------------------===//

static RegionCost controlFlowCost(Operation *op);

RegionCost orrery::sumRegionCost(Region &region) {
  RegionCost cost;
  llvm::SmallPtrSet<void *, 16> seen;
  for (Operation &op : region.getOps()) {
    // A nested If/Loop/Scan is summarized once: asking each of its five
    // getters would walk its bodies five times per level (5^depth).
    if (isa<IfOp, LoopOp, ScanOp>(op)) {
      RegionCost c = controlFlowCost(&op);
      cost.forwardFlops = satAdd(cost.forwardFlops, c.forwardFlops);
      cost.backwardFlops = satAdd(cost.backwardFlops, c.backwardFlops);
      cost.bytesRead = satAdd(cost.bytesRead, c.bytesRead);
      cost.bytesWritten = satAdd(cost.bytesWritten, c.bytesWritten);
      cost.savedBytes = satAdd(cost.savedBytes, c.savedBytes);
      continue;
    }
    auto c = dyn_cast<CostOpInterface>(&op);
    if (!c)
      continue;
    cost.forwardFlops = satAdd(cost.forwardFlops, c.getForwardFlops());
    cost.backwardFlops = satAdd(cost.backwardFlops, c.getBackwardFlops());
    cost.bytesRead = satAdd(cost.bytesRead, c.getBytesRead());
    cost.bytesWritten = satAdd(cost.bytesWritten, c.getBytesWritten());
    cost.savedBytes = satAdd(cost.savedBytes, c.getExtraSavedBytes());
    SmallVector<Value> values;
    c.getSavedForBackward(values);
    for (Value v : values)
      if (seen.insert(storageRoot(v).getAsOpaquePointer()).second)
        cost.savedBytes = satAdd(cost.savedBytes, tensorBytes(v.getType()));
  }
  return cost;
}

Value orrery::storageRoot(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (!isa<ReshapeOp, TransposeOp, SqueezeOp, UnsqueezeOp, FlattenOp,
             IdentityOp>(def) ||
        def->getNumOperands() == 0 ||
        tensorBytes(def->getOperand(0).getType()) != tensorBytes(v.getType()))
      break;
    v = def->getOperand(0);
  }
  return v;
}

// How many times a body runs: If runs one branch once (the larger counts),
// Loop its constant trip count, Scan the scanned axis of its first scan input.
static int64_t tripCount(Operation *op) {
  if (isa<IfOp>(op))
    return 1;
  if (isa<LoopOp>(op)) {
    DenseElementsAttr trip;
    if (op->getNumOperands() &&
        matchPattern(op->getOperand(0), m_Constant(&trip)) &&
        trip.getNumElements() == 1)
      return std::max<int64_t>(0, (*trip.value_begin<APInt>()).getSExtValue());
    return 0;
  }
  int64_t numScanInputs = intAttr(op, "num_scan_inputs", 0);
  int64_t first = int64_t(op->getNumOperands()) - numScanInputs;
  if (numScanInputs <= 0 || first < 0)
    return 0;
  ArrayRef<int64_t> s = shapeOf(op->getOperand(first));
  return s.empty() ? 0 : s[0];
}

// Every iteration keeps its own activations, so the saved bytes scale with
// the trip count like the FLOPs do; they are reported as extra bytes because
// the values inside a body are not values of the enclosing graph.
static RegionCost controlFlowCost(Operation *op) {
  RegionCost total;
  for (Region &region : op->getRegions()) {
    RegionCost c = sumRegionCost(region);
    total.forwardFlops = std::max(total.forwardFlops, c.forwardFlops);
    total.backwardFlops = std::max(total.backwardFlops, c.backwardFlops);
    total.bytesRead = std::max(total.bytesRead, c.bytesRead);
    total.bytesWritten = std::max(total.bytesWritten, c.bytesWritten);
    total.savedBytes = std::max(total.savedBytes, c.savedBytes);
  }
  int64_t n = tripCount(op);
  total.forwardFlops = satMul(total.forwardFlops, n);
  total.backwardFlops = satMul(total.backwardFlops, n);
  total.bytesRead = satMul(total.bytesRead, n);
  total.bytesWritten = satMul(total.bytesWritten, n);
  total.savedBytes = satMul(total.savedBytes, n);
  return total;
}

#define ORRERY_CONTROL_FLOW_COST(OP)                                           \
  int64_t OP::getForwardFlops() {                                              \
    return controlFlowCost(*this).forwardFlops;                                \
  }                                                                            \
  int64_t OP::getBackwardFlops() {                                             \
    return controlFlowCost(*this).backwardFlops;                               \
  }                                                                            \
  int64_t OP::getBytesRead() { return controlFlowCost(*this).bytesRead; }      \
  int64_t OP::getBytesWritten() {                                              \
    return controlFlowCost(*this).bytesWritten;                                \
  }                                                                            \
  int64_t OP::getExtraSavedBytes() {                                           \
    return controlFlowCost(*this).savedBytes;                                  \
  }                                                                            \
  void OP::getSavedForBackward(SmallVectorImpl<Value> &) {}
ORRERY_CONTROL_FLOW_COST(IfOp)
ORRERY_CONTROL_FLOW_COST(LoopOp)
ORRERY_CONTROL_FLOW_COST(ScanOp)
#undef ORRERY_CONTROL_FLOW_COST

//===----------------------------------------------------------------------===//
// Split options (CostOpInterface::getSplitOptions).
//===----------------------------------------------------------------------===//

static bool anyActivationOperand(Operation *op) {
  return llvm::any_of(op->getOperands(),
                      [](Value v) { return isActivation(v); });
}

/// A tensor operand that is neither an activation nor a constant: a weight
/// or a value computed from weights (a transposed weight).
static bool anyWeightOperand(Operation *op) {
  return llvm::any_of(op->getOperands(), [](Value v) {
    return isa<RankedTensorType>(v.getType()) && !isActivation(v) &&
           !v.getDefiningOp<ConstantOp>();
  });
}

unsigned orrery::detail::defaultSplitOptions(Operation *op) {
  return anyActivationOperand(op) ? SplitFollow | SplitBatch | SplitSpatial
                                  : 0u;
}

unsigned orrery::detail::contractionSplitOptions(Operation *op,
                                                 bool spatial) {
  if (!anyActivationOperand(op))
    return 0;
  // With a weight: Megatron's column and row splits, or the batch (and,
  // for a convolution, a spatial split with a halo). Between two
  // activations (attention scores): follow the heads, or the batch.
  unsigned options = anyWeightOperand(op)
                         ? SplitBatch | SplitColumn | SplitRow
                         : SplitFollow | SplitBatch;
  return options | (spatial ? SplitSpatial : 0u);
}

unsigned orrery::detail::moveSplitOptions(Operation *op) {
  if (!anyActivationOperand(op))
    return 0;
  if (isa<GatherOp>(op) && op->getNumOperands() &&
      !isActivation(op->getOperand(0)))
    return SplitBatch | SplitVocab; // an embedding table
  return SplitFollow | SplitBatch;
}

unsigned orrery::detail::reduceSplitOptions(Operation *op) {
  return anyActivationOperand(op) ? SplitFollow | SplitBatch : 0u;
}

unsigned orrery::detail::poolSplitOptions(Operation *op, bool global) {
  if (!anyActivationOperand(op))
    return 0;
  return SplitFollow | SplitBatch | (global ? 0u : SplitSpatial);
}

int64_t orrery::detail::kernelHaloBytes(Operation *op) {
  // [N, C, D1, D2, ...]: neighbours exchange k1 - 1 slices of D1.
  if (!op->getNumOperands())
    return 0;
  auto in = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  if (!in || in.getRank() < 3 || in.getDimSize(2) <= 0)
    return 0;
  int64_t k = 1;
  if (auto kernel = op->getAttrOfType<DenseI64ArrayAttr>("kernel_shape")) {
    if (!kernel.empty())
      k = kernel.asArrayRef()[0];
  } else if (op->getNumOperands() > 1) {
    if (auto w = dyn_cast<RankedTensorType>(op->getOperand(1).getType()))
      if (w.getRank() >= 3)
        k = w.getDimSize(2);
  }
  if (k <= 1)
    return 0;
  return tensorBytes(in) / in.getDimSize(2) * (k - 1);
}
