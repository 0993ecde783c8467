//===- OrreryDialect.h - the orrery dialect ------------------------------===//
#ifndef ORRERY_DIALECT_ORRERYDIALECT_H
#define ORRERY_DIALECT_ORRERYDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "orrery/Dialect/OrreryDialect.h.inc"

namespace orrery {

/// How a tensor-parallel group may split one op, and the collective each
/// way implies (CostOpInterface::getSplitOptions returns a mask of these).
enum SplitOption : unsigned {
  /// A split of its activation input (heads, channels, features) passes
  /// through to its output: no collective.
  SplitFollow = 1u << 0,
  /// The batch splits: each rank runs its samples; weights stay whole and
  /// their gradients are all-reduced across the group.
  SplitBatch = 1u << 1,
  /// Column (output channel): the weight splits on its output dimension,
  /// the output is split, the input gradient is all-reduced in backward.
  SplitColumn = 1u << 2,
  /// Row (input channel): the weight splits on its input dimension, the
  /// input arrives split, the partial output is all-reduced in forward.
  SplitRow = 1u << 3,
  /// A spatial dimension splits: neighbours exchange the kernel's halo
  /// (CostOpInterface::getHaloBytes) forward and backward.
  SplitSpatial = 1u << 4,
  /// An embedding table splits by vocabulary; the rows looked up are
  /// all-reduced in forward.
  SplitVocab = 1u << 5,
};

namespace detail {
// Shared pieces of the cost interface and the verifiers; see OrreryCost.cpp.
unsigned defaultSplitOptions(mlir::Operation *op);
unsigned contractionSplitOptions(mlir::Operation *op, bool spatial);
unsigned moveSplitOptions(mlir::Operation *op);
unsigned reduceSplitOptions(mlir::Operation *op);
unsigned poolSplitOptions(mlir::Operation *op, bool global);
int64_t kernelHaloBytes(mlir::Operation *op);
int64_t defaultForwardFlops(mlir::Operation *op);
int64_t defaultBackwardFlops(mlir::Operation *op);
int64_t defaultBytesRead(mlir::Operation *op);
int64_t defaultBytesWritten(mlir::Operation *op);
void defaultSavedForBackward(mlir::Operation *op,
                             llvm::SmallVectorImpl<mlir::Value> &saved);
int64_t perOutputElementFlops(mlir::Operation *op, int64_t flopsPerElement);
int64_t inputElementFlops(mlir::Operation *op);
int64_t poolFlops(mlir::Operation *op);
int64_t recurrentFlops(mlir::Operation *op, int64_t gates, bool backward);
int64_t recurrentGateBytes(mlir::Operation *op, int64_t gates);
void saveActivationOperands(mlir::Operation *op,
                            llvm::SmallVectorImpl<mlir::Value> &saved);
void saveNonConstantPairOperands(mlir::Operation *op,
                                 llvm::SmallVectorImpl<mlir::Value> &saved);
void saveFirstOperand(mlir::Operation *op,
                      llvm::SmallVectorImpl<mlir::Value> &saved);
mlir::LogicalResult verifyArity(mlir::Operation *op, int minIn, int maxIn,
                                int minOut, int maxOut);
mlir::LogicalResult verifyBroadcast(mlir::Operation *op);
mlir::LogicalResult verifyMatMul(mlir::Operation *op);
mlir::LogicalResult verifyConv(mlir::Operation *op);
} // namespace detail

/// Products and sums of costs saturate at INT64_MAX instead of overflowing:
/// shapes come from untrusted files, and a saturated figure is visibly absurd.
inline int64_t satMul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}
template <typename... Rest>
inline int64_t satMul(int64_t a, int64_t b, Rest... rest) {
  return satMul(satMul(a, b), rest...);
}
inline int64_t satAdd(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

/// Elements of a ranked tensor type; 0 for anything else.
int64_t numElements(mlir::Type type);
/// Bytes of a ranked tensor type (sub-byte elements round up to a byte).
int64_t tensorBytes(mlir::Type type);
/// The cost of running every op of a region once (control-flow ops count
/// their own bodies); saved bytes count each value once, plus masks.
struct RegionCost {
  int64_t forwardFlops = 0, backwardFlops = 0, bytesRead = 0, bytesWritten = 0,
          savedBytes = 0;
};
RegionCost sumRegionCost(mlir::Region &region);

/// True when `value` is an activation: it depends on the data fed to the
/// graph. Weights, constants and values computed from them alone (a
/// transposed weight, a causal mask) are not activations: the backward pass
/// recomputes or reuses them instead of keeping them per step.
bool isActivation(mlir::Value value);
/// The tensor whose storage `value` shares: through reshapes, transposes,
/// (un)squeezes and identities of the same size (PyTorch views). Saved
/// values with the same root are kept once.
mlir::Value storageRoot(mlir::Value value);
/// True when `value` is a weight (an `orrery.weight` or an outlined weight
/// argument).
bool isWeight(mlir::Value value);

/// The shape of one `orrery.fused_attention` (its attributes).
struct AttentionShape {
  int64_t batch = 1, heads = 1, kvHeads = 1, qLen = 1, kvLen = 1,
          headDim = 1, valueDim = 1;
  double scale = 0, dropout = 0;
  bool causal = false;
  int64_t window = 0; ///< sliding window in keys (with causal); 0: none
  /// Multi-head latent attention: the per-token latent every head's K and
  /// V come from, and the rotary part of the key all heads share (0: none).
  int64_t latentDim = 0, ropeDim = 0;
  /// Attention sinks: a learned logit per head in every row's softmax.
  bool sinks = false;
};
/// The attributes of a fused attention op of shape `s`, for its builders
/// (the fusion pass and the importer of ONNX's own Attention).
llvm::SmallVector<mlir::NamedAttribute>
fusedAttentionAttributes(mlir::Builder &b, const AttentionShape &s);
} // namespace orrery

#include "orrery/Dialect/CostOpInterface.h.inc"

#define GET_OP_CLASSES
#include "orrery/Dialect/OrreryOps.h.inc"

#endif // ORRERY_DIALECT_ORRERYDIALECT_H
