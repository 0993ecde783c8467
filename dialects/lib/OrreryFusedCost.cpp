//===- OrreryFusedCost.cpp - costs and verifiers of the fused kernels ----===//
//
// The formulas stated in OrreryFusedOps.td: what FlashAttention, fused
// RMSNorm, SwiGLU and RoPE kernels compute, move and keep.
//
//===----------------------------------------------------------------------===//

#include "orrery/Dialect/OrreryDialect.h"

#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;
using namespace orrery;

//===----------------------------------------------------------------------===//
// fused_attention
//===----------------------------------------------------------------------===//

/// FlashAttention's tile: 128 queries by 128 keys (FA2/FA3 and cuDNN's
/// fused attention at head dim 128 all use 128-row blocks).
static constexpr int64_t kAttentionBlock = 128;

SmallVector<NamedAttribute>
orrery::fusedAttentionAttributes(Builder &b, const AttentionShape &s) {
  SmallVector<NamedAttribute> attrs{
      b.getNamedAttr("batch", b.getI64IntegerAttr(s.batch)),
      b.getNamedAttr("heads", b.getI64IntegerAttr(s.heads)),
      b.getNamedAttr("kv_heads", b.getI64IntegerAttr(s.kvHeads)),
      b.getNamedAttr("q_len", b.getI64IntegerAttr(s.qLen)),
      b.getNamedAttr("kv_len", b.getI64IntegerAttr(s.kvLen)),
      b.getNamedAttr("head_dim", b.getI64IntegerAttr(s.headDim)),
      b.getNamedAttr("value_dim", b.getI64IntegerAttr(s.valueDim)),
      b.getNamedAttr("scale", b.getF64FloatAttr(s.scale)),
      b.getNamedAttr("dropout", b.getF64FloatAttr(s.dropout))};
  if (s.causal)
    attrs.push_back(b.getNamedAttr("causal", b.getUnitAttr()));
  if (s.window > 0)
    attrs.push_back(b.getNamedAttr("window", b.getI64IntegerAttr(s.window)));
  if (s.sinks)
    attrs.push_back(b.getNamedAttr("sinks", b.getUnitAttr()));
  if (s.latentDim > 0) {
    attrs.push_back(
        b.getNamedAttr("latent_dim", b.getI64IntegerAttr(s.latentDim)));
    attrs.push_back(b.getNamedAttr("rope_dim", b.getI64IntegerAttr(s.ropeDim)));
  }
  return attrs;
}

LogicalResult FusedAttentionOp::verify() {
  int64_t b = getBatch(), h = getHeads(), kvh = getKvHeads(), q = getQLen(),
          k = getKvLen(), d = getHeadDim(), dv = getValueDim();
  for (auto [name, v] :
       {std::pair<const char *, int64_t>{"batch", b}, {"heads", h},
        {"kv_heads", kvh}, {"q_len", q}, {"kv_len", k}, {"head_dim", d},
        {"value_dim", dv}})
    if (v <= 0)
      return emitOpError() << "'" << name << "' must be positive, got " << v;
  if (h % kvh != 0)
    return emitOpError() << "kv_heads " << kvh << " must divide heads " << h;
  if (auto w = getWindow()) {
    if (*w < 1)
      return emitOpError() << "window must be positive, got " << *w;
    if (!getCausal())
      return emitOpError() << "a window needs the causal mask";
  }
  if (getRopeDim() && !getLatentDim())
    return emitOpError() << "rope_dim needs latent_dim";
  if (auto l = getLatentDim()) {
    int64_t rope = getRopeDim() ? *getRopeDim() : 0;
    if (*l < 1 || rope < 0 || rope >= d)
      return emitOpError() << "latent_dim " << *l << " and rope_dim " << rope
                           << " must be positive and below head_dim " << d;
  }
  double p = getDropout().convertToDouble();
  if (!(p >= 0 && p < 1))
    return emitOpError() << "dropout must be in [0, 1), got " << p;
  auto expect = [&](Value v, int64_t elements,
                    const char *what) -> LogicalResult {
    if (numElements(v.getType()) != elements)
      return emitOpError() << what << " has " << numElements(v.getType())
                           << " elements; the attributes give " << elements;
    return success();
  };
  if (failed(expect(getQuery(), satMul(b, h, q, d), "query")) ||
      failed(expect(getKey(), satMul(b, kvh, k, d), "key")) ||
      failed(expect(getValue(), satMul(b, kvh, k, dv), "value")) ||
      failed(expect(getOutput(), satMul(b, h, q, dv), "output")))
    return failure();
  return success();
}

double FusedAttentionOp::computedBlockFraction() {
  if (!getCausal())
    return 1.0;
  // Query block i sees the keys up to its last row; a mask aligned to the
  // bottom right (kv_len > q_len: the keys of earlier tokens) shifts it.
  int64_t q = getQLen(), k = getKvLen();
  int64_t nq = (q + kAttentionBlock - 1) / kAttentionBlock;
  int64_t nk = (k + kAttentionBlock - 1) / kAttentionBlock;
  int64_t offset = std::max<int64_t>(0, k - q);
  // A window: row r sees keys r + offset - window + 1 to r + offset.
  int64_t window = getWindow() ? *getWindow() : 0;
  int64_t computed = 0;
  for (int64_t i = 0; i < nq; ++i) {
    int64_t lastKey = std::min(k, (i + 1) * kAttentionBlock + offset);
    int64_t last =
        std::min(nk, (lastKey + kAttentionBlock - 1) / kAttentionBlock);
    int64_t first = 0;
    if (window > 0)
      first = std::max<int64_t>(0, i * kAttentionBlock + offset - window + 1) /
              kAttentionBlock;
    computed += std::max<int64_t>(0, last - first);
  }
  return double(computed) / double(nq * nk);
}

int64_t FusedAttentionOp::getForwardFlops() {
  int64_t full = satMul(2, getBatch(), getHeads(), getQLen(), getKvLen(),
                        satAdd(getHeadDim(), getValueDim()));
  if (full == INT64_MAX)
    return full;
  return int64_t(double(full) * computedBlockFraction());
}

int64_t FusedAttentionOp::getBackwardFlops() {
  int64_t f = getForwardFlops();
  return f == INT64_MAX ? f : satAdd(satMul(2, f), f / 2);
}

/// The log-sum-exp of each query row, fp32: what the backward needs
/// besides Q, K, V and the output.
static int64_t logSumExpBytes(FusedAttentionOp op) {
  return satMul(4, op.getBatch(), op.getHeads(), op.getQLen());
}

int64_t FusedAttentionOp::getBytesRead() {
  return detail::defaultBytesRead(*this);
}

int64_t FusedAttentionOp::getBytesWritten() {
  return satAdd(tensorBytes(getOutput().getType()), logSumExpBytes(*this));
}

void FusedAttentionOp::getSavedForBackward(SmallVectorImpl<Value> &saved) {
  for (Value v : getOperands())
    if (isActivation(v))
      saved.push_back(v);
  saved.push_back(getOutput());
}

int64_t FusedAttentionOp::getExtraSavedBytes() {
  return logSumExpBytes(*this);
}

unsigned FusedAttentionOp::getSplitOptions() {
  // Heads split over the tensor-parallel group, or the batch.
  return isActivation(getQuery()) ? SplitFollow | SplitBatch : 0u;
}

//===----------------------------------------------------------------------===//
// rms_normalization, gated_activation, rotary_embedding
//===----------------------------------------------------------------------===//

static LogicalResult sameShape(Operation *op, Value a, Value b,
                               const char *what) {
  if (a.getType() != b.getType() &&
      cast<RankedTensorType>(a.getType()).getShape() !=
          cast<RankedTensorType>(b.getType()).getShape())
    return op->emitOpError() << what << " must have the result's shape";
  return success();
}

LogicalResult RmsNormalizationOp::verify() {
  if (getEpsilon().convertToDouble() < 0)
    return emitOpError() << "epsilon must not be negative";
  return sameShape(*this, getInput(), getOutput(), "input");
}

int64_t RmsNormalizationOp::getForwardFlops() {
  return satMul(4, numElements(getOutput().getType()));
}

void RmsNormalizationOp::getSavedForBackward(SmallVectorImpl<Value> &saved) {
  if (isActivation(getInput()))
    saved.push_back(getInput());
}

unsigned RmsNormalizationOp::getSplitOptions() {
  unsigned options = detail::defaultSplitOptions(*this);
  auto t = dyn_cast<RankedTensorType>(getInput().getType());
  if (!t || t.getRank() < 4)
    options &= ~unsigned(SplitFollow); // its rows split by features
  return options;
}

int64_t RmsNormalizationOp::getExtraSavedBytes() {
  auto t = cast<RankedTensorType>(getInput().getType());
  if (t.getRank() == 0 || t.getShape().back() <= 0)
    return 0;
  return satMul(4, numElements(t) / t.getShape().back());
}

LogicalResult GatedActivationOp::verify() {
  StringRef a = getActivation();
  if (a != "silu" && a != "gelu")
    return emitOpError() << "activation must be 'silu' or 'gelu', got '" << a
                         << "'";
  if (failed(sameShape(*this, getGate(), getOutput(), "gate")))
    return failure();
  if (Value w = getWeights()) {
    auto out = cast<RankedTensorType>(getOutput().getType());
    int64_t row = out.getRank() ? out.getShape().back() : 1;
    if (row <= 0 || numElements(w.getType()) * row != numElements(out))
      return emitOpError() << "weights must hold one scale a row of the output";
  }
  return sameShape(*this, getUp(), getOutput(), "up");
}

int64_t GatedActivationOp::getForwardFlops() {
  return satMul(getWeights() ? 7 : 6, numElements(getOutput().getType()));
}

void GatedActivationOp::getSavedForBackward(SmallVectorImpl<Value> &saved) {
  for (Value v : {getGate(), getUp(), getWeights()})
    if (v && isActivation(v))
      saved.push_back(v);
}

LogicalResult RotaryEmbeddingOp::verify() {
  return sameShape(*this, getInput(), getOutput(), "input");
}

int64_t RotaryEmbeddingOp::getForwardFlops() {
  return satMul(3, numElements(getOutput().getType()));
}

int64_t RotaryEmbeddingOp::getBytesRead() {
  return tensorBytes(getInput().getType());
}

void RotaryEmbeddingOp::getSavedForBackward(SmallVectorImpl<Value> &) {}
