//===- ContribOps.h - quantized and com.microsoft ops as standard ONNX -----===//
//
// The ops onnxruntime's tools write into the models people ship: ONNX's
// integer and quantized-linear ops (MatMulInteger, ConvInteger,
// QLinearMatMul, QLinearConv) and onnxruntime's com.microsoft contrib ops
// (the transformer optimizer's fused Attention, SkipLayerNormalization,
// EmbedLayerNormalization and GELUs; the quantizers' QLinear*, QGemm,
// QAttention, DynamicQuantizeMatMul, DynamicQuantizeLSTM and MatMulNBits).
// Each becomes the standard nodes it computes, as onnxruntime's kernels
// define it (onnxruntime docs/ContribOperators.md), so the shape rules, the
// cost formulas and the attention fusion see what they already know; a
// quantized weight keeps its stored element type (int8, int4), so its bytes
// are priced as stored.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_ONNX_LIB_CONTRIBOPS_H
#define ORRERY_ONNX_LIB_CONTRIBOPS_H

#include "orrery/Onnx/GraphDesc.h"

#include <map>
#include <optional>
#include <vector>

namespace orrery::onnx::detail {

/// Standard nodes in order, the small constants they read (named after the
/// node), and the element type of each output that differs from what the
/// standard op's rule infers (MatMulInteger's int32, QLinearConv's uint8).
struct Expansion {
  std::vector<ValueDesc> constants;
  std::vector<NodeDesc> nodes;
  std::map<std::string, ElemType> outputTypes;
};

/// `n` as standard nodes, or nullopt when it is none of these ops. Throws
/// LoadError when it is one but uses what is not priced (a KV cache, a
/// layout the expansion does not cover), naming the node.
std::optional<Expansion>
expandContribOp(const NodeDesc &n, const std::vector<const ValueDesc *> &in);

/// A weight stored quantized as one of `n`'s inputs: the input's index and,
/// for MatMulNBits' packed blocks, the [K, N] matrix of `bits`-bit elements
/// it holds (0 elsewhere: the initializer as stored).
struct QuantizedWeight {
  size_t input;
  int64_t rows = 0, cols = 0, bits = 0;
};
/// The inputs of `n` that hold model weights stored as integers: they are
/// parameters, counted and moved at their stored width.
std::vector<QuantizedWeight> quantizedWeights(const NodeDesc &n);

} // namespace orrery::onnx::detail

#endif // ORRERY_ONNX_LIB_CONTRIBOPS_H
