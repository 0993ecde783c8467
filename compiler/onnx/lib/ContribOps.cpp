//===- ContribOps.cpp - quantized and com.microsoft ops as standard ONNX ---===//
#include "ContribOps.h"
#include "Inference.h"

#include <cmath>
#include <functional>

namespace orrery::onnx::detail {

namespace {

AttrDesc intAttr(const char *name, int64_t v) {
  AttrDesc a;
  a.name = name;
  a.kind = AttrDesc::Kind::Int;
  a.i = v;
  return a;
}
AttrDesc floatAttr(const char *name, double v) {
  AttrDesc a;
  a.name = name;
  a.kind = AttrDesc::Kind::Float;
  a.f = v;
  return a;
}
AttrDesc intsAttr(const char *name, std::vector<int64_t> v) {
  AttrDesc a;
  a.name = name;
  a.kind = AttrDesc::Kind::Ints;
  a.ints = std::move(v);
  return a;
}
AttrDesc stringAttr(const char *name, std::string v) {
  AttrDesc a;
  a.name = name;
  a.kind = AttrDesc::Kind::String;
  a.s = std::move(v);
  return a;
}

/// Writes the standard nodes of one contrib node: fresh value names under
/// the node's name, small constants, the node's own outputs at the end.
class Emitter {
public:
  Emitter(const NodeDesc &n, const std::vector<const ValueDesc *> &in)
      : n(n), in(in) {}

  [[noreturn]] void refuse(const std::string &why) const {
    throw LoadError(describe(n) + ": " + why);
  }
  bool has(size_t i) const {
    return i < n.inputs.size() && !n.inputs[i].empty() && i < in.size() &&
           in[i];
  }
  const std::string &input(size_t i) const {
    if (!has(i))
      refuse("missing required input " + std::to_string(i));
    return n.inputs[i];
  }
  const std::vector<int64_t> &shape(size_t i) const {
    input(i);
    return in[i]->shape;
  }
  ElemType type(size_t i) const { return has(i) ? in[i]->type : ElemType::Undefined; }
  bool wants(size_t o) const {
    return o < n.outputs.size() && !n.outputs[o].empty();
  }
  /// Output `o`'s name, or a fresh one when the node leaves it unnamed.
  std::string output(size_t o) { return wants(o) ? n.outputs[o] : fresh("out"); }
  std::string fresh(const std::string &what) {
    return n.name + "/orrery." + what + "_" + std::to_string(next++);
  }
  std::string constant(ElemType t, std::vector<int64_t> shape,
                       std::vector<double> values) {
    ValueDesc v;
    v.name = fresh("const");
    v.type = t;
    v.shape = std::move(shape);
    v.kind = ValueKind::Constant;
    v.values = std::move(values);
    e.constants.push_back(v);
    return v.name;
  }
  std::string ints(const std::vector<int64_t> &v) {
    return constant(ElemType::Int64, {int64_t(v.size())},
                    std::vector<double>(v.begin(), v.end()));
  }
  std::string scalar(double v) { return constant(ElemType::Float, {}, {v}); }
  /// One node; returns its first output (`out`, or a fresh name).
  std::string op(const char *type, std::vector<std::string> inputs,
                 std::vector<AttrDesc> attrs = {}, std::string out = "") {
    return opN(type, std::move(inputs), {out.empty() ? fresh(type) : out},
               std::move(attrs))[0];
  }
  std::vector<std::string> opN(const char *type, std::vector<std::string> inputs,
                               std::vector<std::string> outs,
                               std::vector<AttrDesc> attrs = {}) {
    NodeDesc d;
    d.name = n.name + "/" + type + "_" + std::to_string(next++);
    d.opType = type;
    d.inputs = std::move(inputs);
    d.outputs = outs;
    d.attrs = std::move(attrs);
    e.nodes.push_back(std::move(d));
    return outs;
  }
  /// `x` with its last two axes swapped.
  std::string transposeLast(const std::string &x, size_t rank) {
    std::vector<int64_t> perm;
    for (size_t i = 0; i < rank; ++i)
      perm.push_back(int64_t(i));
    std::swap(perm[rank - 1], perm[rank - 2]);
    return op("Transpose", {x}, {intsAttr("perm", perm)});
  }
  std::string slice(const std::string &x, int64_t axis, int64_t from,
                    int64_t to) {
    return op("Slice", {x, ints({from}), ints({to}), ints({axis})});
  }
  /// The node's output `o` typed `t` where the standard op infers another.
  void typed(size_t o, ElemType t) {
    if (wants(o) && t != ElemType::Undefined)
      e.outputTypes[n.outputs[o]] = t;
  }

  const NodeDesc &n;
  const std::vector<const ValueDesc *> &in;
  Expansion e;

private:
  int next = 0;
};

/// The attention layout and its sizes.
struct Heads {
  int64_t batch, seq, keys, heads, kvHeads, dim, valueDim;
  double scale;
  bool causal;
};

/// Scaled dot-product attention as the exporters write it out (the
/// attention fusion reads it back as one kernel): q [B,S,N*H], k [B,L,Nkv*H],
/// v [B,L,Nkv*Hv] into `out` [B,S,N*Hv]; grouped key-value heads repeated
/// as transformers' repeat_kv does; the causal mask a Trilu of a filled
/// tensor; `bias` (optional) added to the scores.
void attentionCore(Emitter &m, const std::string &q, std::string k,
                   std::string v, const Heads &h, const std::string &bias,
                   const std::string &out) {
  auto heads = [&](const std::string &x, int64_t len, int64_t n, int64_t d,
                   std::vector<int64_t> perm) {
    std::string r = m.op("Reshape", {x, m.ints({h.batch, len, n, d})});
    return m.op("Transpose", {r}, {intsAttr("perm", perm)});
  };
  std::string qh = heads(q, h.seq, h.heads, h.dim, {0, 2, 1, 3});
  std::string kh = heads(k, h.keys, h.kvHeads, h.dim, {0, 2, 1, 3});
  std::string vh = heads(v, h.keys, h.kvHeads, h.valueDim, {0, 2, 1, 3});
  if (h.kvHeads != h.heads) {
    int64_t group = h.heads / h.kvHeads;
    auto repeat = [&](const std::string &x, int64_t d) {
      std::string r =
          m.op("Reshape", {x, m.ints({h.batch, h.kvHeads, 1, h.keys, d})});
      r = m.op("Expand", {r, m.ints({h.batch, h.kvHeads, group, h.keys, d})});
      return m.op("Reshape", {r, m.ints({h.batch, h.heads, h.keys, d})});
    };
    kh = repeat(kh, h.dim);
    vh = repeat(vh, h.valueDim);
  }
  std::string kt =
      m.op("Transpose", {kh}, {intsAttr("perm", {0, 1, 3, 2})});
  std::string s = m.op("MatMul", {qh, kt});
  s = m.op("Mul", {s, m.scalar(h.scale)});
  if (h.causal) {
    std::string filled =
        m.op("Expand", {m.scalar(-10000.0), m.ints({h.seq, h.keys})});
    std::string above = m.op("Trilu", {filled, m.ints({h.keys - h.seq + 1})},
                             {intAttr("upper", 1)});
    s = m.op("Add", {s, above});
  }
  if (!bias.empty())
    s = m.op("Add", {s, bias});
  std::string p = m.op("Softmax", {s}, {intAttr("axis", -1)});
  std::string o = m.op("MatMul", {p, vh});
  o = m.op("Transpose", {o}, {intsAttr("perm", {0, 2, 1, 3})});
  m.op("Reshape", {o, m.ints({h.batch, h.seq, h.heads * h.valueDim})}, {},
       out);
}

int64_t positive(Emitter &m, const char *what, int64_t v) {
  if (v <= 0)
    m.refuse(std::string(what) + " must be positive, is " + std::to_string(v));
  return v;
}

/// com.microsoft Attention and QAttention: the packed QKV projection (an
/// int8 weight for QAttention), then attention over its three slices.
void packedAttention(Emitter &m, size_t pastInput) {
  const NodeDesc &n = m.n;
  if (m.has(pastInput) || m.wants(1))
    m.refuse("a KV cache (past or present inputs and outputs: a decoding "
             "export) is not priced; export the model without the cache");
  if (attrInt(n, "do_rotary", 0))
    m.refuse("rotary embedding inside Attention is not priced");
  const std::vector<int64_t> &x = m.shape(0), &w = m.shape(1);
  if (x.size() != 3 || w.size() != 2)
    m.refuse("expects input [batch, sequence, hidden] and weights [hidden, "
             "q + k + v]");
  int64_t heads = positive(m, "num_heads", attrInt(n, "num_heads", 0));
  std::vector<int64_t> sizes = attrInts(n, "qkv_hidden_sizes");
  if (sizes.empty())
    sizes.assign(3, w[1] / 3);
  if (sizes.size() != 3 || sizes[0] + sizes[1] + sizes[2] != w[1] ||
      sizes[0] != sizes[1] || sizes[0] % heads || sizes[2] % heads)
    m.refuse("qkv_hidden_sizes do not split the weights' " +
             std::to_string(w[1]) + " columns into q, k and v over " +
             std::to_string(heads) + " heads");
  std::string qkv = m.op("MatMul", {m.input(0), m.input(1)});
  if (m.has(2))
    qkv = m.op("Add", {qkv, m.input(2)});
  std::string q = m.slice(qkv, 2, 0, sizes[0]);
  std::string k = m.slice(qkv, 2, sizes[0], sizes[0] + sizes[1]);
  std::string v = m.slice(qkv, 2, sizes[0] + sizes[1], w[1]);
  int64_t dim = sizes[0] / heads;
  double scale = attrFloat(n, "scale", 0);
  Heads h{x[0], x[1], x[1], heads, heads, dim, sizes[2] / heads,
          scale > 0 ? scale : 1 / std::sqrt(double(dim)),
          attrInt(n, "unidirectional", 0) != 0};
  // Attention's input 5 adds a bias to the scores (QAttention has none).
  std::string bias = pastInput == 4 && m.has(5) ? m.input(5) : "";
  attentionCore(m, q, k, v, h, bias, m.output(0));
}

/// MultiHeadAttention and GroupQueryAttention on separate (or, for GQA,
/// packed) query, key and value [batch, sequence, heads x dim].
void separateAttention(Emitter &m, bool grouped) {
  const NodeDesc &n = m.n;
  size_t pastKey = grouped ? 3 : 6;
  if (m.has(pastKey) && m.shape(pastKey).size() == 4 &&
      m.shape(pastKey)[2] > 0)
    m.refuse("a KV cache of " + std::to_string(m.shape(pastKey)[2]) +
             " tokens (a decoding step) is not priced; bind the past "
             "sequence length to 0 to price the prefill");
  if (!grouped && (m.has(6) || m.has(7) || m.wants(1) || m.wants(2)))
    m.refuse("a KV cache (past or present key and value) is not priced; "
             "export the model without the cache");
  const std::vector<int64_t> &q = m.shape(0);
  int64_t heads = positive(m, "num_heads", attrInt(n, "num_heads", 0));
  int64_t kvHeads =
      grouped ? positive(m, "kv_num_heads", attrInt(n, "kv_num_heads", 0))
              : heads;
  if (q.size() != 3 || heads % kvHeads)
    m.refuse("expects query [batch, sequence, heads x dim] and num_heads a "
             "multiple of kv_num_heads");
  std::string qv = m.input(0), kv, vv;
  int64_t keys, dim;
  if (m.has(1)) {
    const std::vector<int64_t> &k = m.shape(1);
    if (k.size() != 3 || !m.has(2) || m.shape(2).size() != 3 || q[2] % heads)
      m.refuse("key and value must be [batch, sequence, heads x dim] (the "
               "packed and cached layouts are not priced)");
    kv = m.input(1), vv = m.input(2), keys = k[1], dim = q[2] / heads;
  } else if (grouped && q[2] % (heads + 2 * kvHeads) == 0) {
    dim = q[2] / (heads + 2 * kvHeads), keys = q[1];
    qv = m.slice(m.input(0), 2, 0, heads * dim);
    kv = m.slice(m.input(0), 2, heads * dim, (heads + kvHeads) * dim);
    vv = m.slice(m.input(0), 2, (heads + kvHeads) * dim, q[2]);
  } else {
    m.refuse("a packed query, key and value is not priced here");
  }
  if (!grouped && m.has(3)) { // bias [3 x hidden] over q, k and v
    int64_t d = q[2];
    qv = m.op("Add", {qv, m.slice(m.input(3), 0, 0, d)});
    kv = m.op("Add", {kv, m.slice(m.input(3), 0, d, 2 * d)});
    vv = m.op("Add", {vv, m.slice(m.input(3), 0, 2 * d, 3 * d)});
  }
  if (grouped && attrInt(n, "do_rotary", 0)) {
    qv = m.op("RotaryEmbedding", {qv, m.input(7), m.input(8)},
              {intAttr("num_heads", heads)});
    kv = m.op("RotaryEmbedding", {kv, m.input(7), m.input(8)},
              {intAttr("num_heads", kvHeads)});
  }
  if (grouped && attrInt(n, "local_window_size", -1) > 0)
    m.refuse("local_window_size (sliding-window attention) is not priced "
             "inside GroupQueryAttention");
  double scale = attrFloat(n, "scale", 0);
  Heads h{q[0], q[1], keys, heads, kvHeads, dim, dim,
          scale > 0 ? scale : 1 / std::sqrt(double(dim)),
          grouped || attrInt(n, "unidirectional", 0) != 0};
  std::string bias = !grouped && m.has(5) ? m.input(5) : "";
  attentionCore(m, qv, kv, vv, h, bias, m.output(0));
}

/// (EmbedLayerNormalization and its quantized form) the word, position and
/// segment embeddings summed, then layer normalization. `deq(i)`: table or
/// normalization input i as float (dequantized for QEmbedLayerNormalization).
void embedLayerNorm(Emitter &m,
                    const std::function<std::string(size_t)> &deq,
                    bool quantized) {
  const std::vector<int64_t> &ids = m.shape(0);
  if (ids.size() != 2)
    m.refuse("expects input_ids [batch, sequence]");
  std::string sum = m.op("Gather", {deq(2), m.input(0)});
  if (!quantized && m.has(8)) {
    sum = m.op("Add", {sum, m.op("Gather", {deq(3), m.input(8)})});
  } else {
    std::string rows = m.slice(deq(3), 0, 0, ids[1]);
    sum = m.op("Add", {sum, rows});
  }
  if (m.has(1) && m.has(4))
    sum = m.op("Add", {sum, m.op("Gather", {deq(4), m.input(1)})});
  std::vector<std::string> norm = {sum, deq(5)};
  if (m.has(6))
    norm.push_back(deq(6));
  m.op("LayerNormalization", norm,
       {intAttr("axis", -1), floatAttr("epsilon", attrFloat(m.n, "epsilon", 1e-12))},
       m.output(0));
  if (m.wants(1)) // mask_index: the unpadded lengths, read by no priced op
    m.op("Identity",
         {m.constant(ElemType::Int32, {ids[0]},
                     std::vector<double>(size_t(ids[0]), double(ids[1])))},
         {}, m.n.outputs[1]);
  if (m.wants(2))
    m.op("Identity", {sum}, {}, m.n.outputs[2]);
}

/// SkipLayerNormalization, SkipSimplifiedLayerNormalization: input + skip
/// (+ bias), then layer (or RMS) normalization; output 3 is the sum.
void skipLayerNorm(Emitter &m, bool simplified) {
  std::string sum = m.op("Add", {m.input(0), m.input(1)});
  size_t biasInput = simplified ? 3 : 4;
  if (m.has(biasInput))
    sum = m.op("Add", {sum, m.input(biasInput)});
  if (m.wants(3))
    sum = m.op("Identity", {sum}, {}, m.n.outputs[3]);
  std::vector<AttrDesc> attrs = {
      intAttr("axis", -1),
      floatAttr("epsilon", attrFloat(m.n, "epsilon", 1e-12))};
  if (simplified) {
    m.op("RMSNormalization", {sum, m.input(2)}, attrs, m.output(0));
    return;
  }
  std::vector<std::string> in = {sum, m.input(2)};
  if (m.has(3))
    in.push_back(m.input(3));
  m.opN("LayerNormalization", in,
        {m.output(0), m.wants(1) ? m.n.outputs[1] : "",
         m.wants(2) ? m.n.outputs[2] : ""},
        attrs);
}

/// Ops that quantize only their operands and output: the float op on the
/// stored integers, typed as the output's zero point.
struct QLinear {
  const char *op;
  std::vector<size_t> operands;
  size_t outputZeroPoint;
};
const std::map<std::string, QLinear> &qlinearOps() {
  static const std::map<std::string, QLinear> ops = {
      {"QLinearAdd", {"Add", {0, 3}, 7}},
      {"QLinearMul", {"Mul", {0, 3}, 7}},
      {"QLinearSigmoid", {"Sigmoid", {0}, 4}},
      {"QLinearLeakyRelu", {"LeakyRelu", {0}, 4}},
      {"QLinearSoftmax", {"Softmax", {0}, 4}},
      {"QLinearAveragePool", {"AveragePool", {0}, 4}},
      {"QLinearGlobalAveragePool", {"GlobalAveragePool", {0}, 4}},
      {"QLinearReduceMean", {"ReduceMean", {0}, 4}},
  };
  return ops;
}

/// The node's attributes minus the ones the standard op does not take.
std::vector<AttrDesc> attrsWithout(const NodeDesc &n,
                                   std::initializer_list<const char *> drop) {
  std::vector<AttrDesc> out;
  for (const AttrDesc &a : n.attrs)
    if (std::none_of(drop.begin(), drop.end(),
                     [&](const char *d) { return a.name == d; }))
      out.push_back(a);
  return out;
}

/// ONNX's own integer and quantized-linear ops (default domain).
bool expandStandardQuantized(Emitter &m) {
  const std::string &op = m.n.opType;
  if (op == "MatMulInteger" || op == "ConvInteger") {
    m.op(op == "MatMulInteger" ? "MatMul" : "Conv", {m.input(0), m.input(1)},
         op == "ConvInteger" ? m.n.attrs : std::vector<AttrDesc>{},
         m.output(0));
    m.typed(0, ElemType::Int32);
  } else if (op == "QLinearMatMul") {
    m.op("MatMul", {m.input(0), m.input(3)}, {}, m.output(0));
    m.typed(0, m.type(7));
  } else if (op == "QLinearConv") {
    std::vector<std::string> in = {m.input(0), m.input(3)};
    if (m.has(8))
      in.push_back(m.input(8));
    m.op("Conv", in, m.n.attrs, m.output(0));
    m.typed(0, m.type(7));
  } else {
    return false;
  }
  return true;
}

/// com.microsoft's GELUs, FusedMatMul, BiasAdd and the quantized matmuls.
bool expandContribArithmetic(Emitter &m) {
  const NodeDesc &n = m.n;
  const std::string &op = n.opType;
  if (op == "Gelu" || op == "FastGelu" || op == "BiasGelu") {
    std::string x = m.input(0);
    if (m.has(1))
      x = m.op("Add", {x, m.input(1)});
    std::vector<AttrDesc> a;
    if (op == "FastGelu")
      a.push_back(stringAttr("approximate", "tanh"));
    m.op("Gelu", {x}, a, m.output(0));
  } else if (op == "QuickGelu") {
    std::string s = m.op("Sigmoid", {m.op("Mul", {m.input(0), m.scalar(attrFloat(n, "alpha", 1.702))})});
    m.op("Mul", {m.input(0), s}, {}, m.output(0));
  } else if (op == "BiasAdd") {
    std::string s = m.op("Add", {m.input(0), m.input(1)});
    m.op("Add", {s, m.input(2)}, {}, m.output(0));
  } else if (op == "FusedMatMul") {
    if (attrInt(n, "transBatchA", 0) || attrInt(n, "transBatchB", 0))
      m.refuse("transBatchA and transBatchB are not priced");
    std::string a = m.input(0), b = m.input(1);
    if (attrInt(n, "transA", 0))
      a = m.transposeLast(a, m.shape(0).size());
    if (attrInt(n, "transB", 0))
      b = m.transposeLast(b, m.shape(1).size());
    double alpha = attrFloat(n, "alpha", 1);
    std::string y = m.op("MatMul", {a, b}, {}, alpha == 1 ? m.output(0) : "");
    if (alpha != 1)
      m.op("Mul", {y, m.scalar(alpha)}, {}, m.output(0));
  } else if (op == "DynamicQuantizeMatMul" || op == "MatMulIntegerToFloat" ||
             op == "MatMulNBits") {
    size_t biasInput = op == "DynamicQuantizeMatMul" ? 4
                       : op == "MatMulNBits"         ? 5
                                                     : 6;
    bool bias = m.has(biasInput);
    std::string y =
        m.op("MatMul", {m.input(0), m.input(1)}, {}, bias ? "" : m.output(0));
    if (bias)
      m.op("Add", {y, m.input(biasInput)}, {}, m.output(0));
    if (op == "MatMulIntegerToFloat")
      m.typed(0, m.type(2)); // float, as its scales
  } else if (op == "QGemm") {
    std::vector<std::string> in = {m.input(0), m.input(3)};
    if (m.has(6))
      in.push_back(m.input(6));
    m.op("Gemm", in, attrsWithout(n, {}), m.output(0));
    m.typed(0, m.has(8) ? m.type(8) : ElemType::Float);
  } else if (auto q = qlinearOps().find(op); q != qlinearOps().end()) {
    if (attrInt(n, "channels_last", 0))
      m.refuse("channels_last (NHWC) is not priced");
    std::vector<std::string> in;
    for (size_t i : q->second.operands)
      in.push_back(m.input(i));
    m.op(q->second.op, in, attrsWithout(n, {"channels_last"}), m.output(0));
    m.typed(0, m.type(q->second.outputZeroPoint));
  } else if (op == "QLinearConcat") { // y_scale, y_zp, then (x, scale, zp)...
    std::vector<std::string> in;
    for (size_t i = 2; i < n.inputs.size(); i += 3)
      in.push_back(m.input(i));
    m.op("Concat", in, n.attrs, m.output(0));
    m.typed(0, m.type(1));
  } else {
    return false;
  }
  return true;
}

/// com.microsoft's normalizations, attention and recurrent ops.
bool expandContribLayers(Emitter &m) {
  const NodeDesc &n = m.n;
  const std::string &op = n.opType;
  if (op == "SkipLayerNormalization" ||
      op == "SkipSimplifiedLayerNormalization") {
    skipLayerNorm(m, op == "SkipSimplifiedLayerNormalization");
  } else if (op == "SimplifiedLayerNormalization") {
    m.op("RMSNormalization", {m.input(0), m.input(1)},
         {intAttr("axis", attrInt(n, "axis", -1)),
          floatAttr("epsilon", attrFloat(n, "epsilon", 1e-5))},
         m.output(0));
  } else if (op == "EmbedLayerNormalization") {
    embedLayerNorm(m, [&](size_t i) { return m.input(i); }, false);
  } else if (op == "QEmbedLayerNormalization") {
    // Tables 2-6 with scales 8-12 and zero points 13-17.
    embedLayerNorm(m, [&](size_t i) {
      std::vector<std::string> in = {m.input(i), m.input(i + 6)};
      if (m.has(i + 11))
        in.push_back(m.input(i + 11));
      return m.op("DequantizeLinear", in);
    }, true);
  } else if (op == "Attention") {
    packedAttention(m, 4);
  } else if (op == "QAttention") {
    packedAttention(m, 8);
  } else if (op == "MultiHeadAttention") {
    separateAttention(m, false);
  } else if (op == "GroupQueryAttention") {
    separateAttention(m, true);
  } else if (op == "RotaryEmbedding") {
    std::vector<std::string> in = {m.input(0), m.input(2), m.input(3),
                                   m.input(1)};
    m.op("RotaryEmbedding", in, attrsWithout(n, {"scale", "is_packed_batching"}),
         m.output(0));
  } else if (op == "DynamicQuantizeLSTM") {
    // X, W, R, B, sequence_lens, initial_h, initial_c, P; then W's and R's
    // scales and zero points. W and R are stored [dirs, in, 4h] (LSTM's
    // transposed): the same elements and work.
    std::vector<std::string> in;
    for (size_t i = 0; i < 8 && i < n.inputs.size(); ++i)
      in.push_back(m.has(i) ? m.input(i) : "");
    std::string wt = m.transposeLast(m.input(1), 3);
    std::string rt = m.transposeLast(m.input(2), 3);
    in[1] = wt, in[2] = rt;
    m.opN("LSTM", in, n.outputs, n.attrs);
  } else {
    return false;
  }
  return true;
}

} // namespace

std::optional<Expansion>
expandContribOp(const NodeDesc &n, const std::vector<const ValueDesc *> &in) {
  Emitter m(n, in);
  bool expanded = n.domain.empty() ? expandStandardQuantized(m)
                  : n.domain == "com.microsoft"
                      ? expandContribArithmetic(m) || expandContribLayers(m)
                      : false;
  if (!expanded)
    return std::nullopt;
  return std::move(m.e);
}

std::vector<QuantizedWeight> quantizedWeights(const NodeDesc &n) {
  const std::string &op = n.opType;
  if (n.domain.empty()) {
    if (op == "MatMulInteger" || op == "ConvInteger")
      return {{1}};
    if (op == "QLinearMatMul")
      return {{3}};
    if (op == "QLinearConv")
      return {{3}, {8}}; // the weight and the int32 bias
    if (op == "DequantizeLinear")
      return {{0}};
    return {};
  }
  if (n.domain != "com.microsoft")
    return {};
  if (op == "QAttention" || op == "DynamicQuantizeMatMul" ||
      op == "MatMulIntegerToFloat")
    return {{1}};
  if (op == "QGemm")
    return {{3}, {6}};
  if (op == "DynamicQuantizeLSTM")
    return {{1}, {2}};
  if (op == "QEmbedLayerNormalization")
    return {{2}, {3}, {4}, {5}, {6}};
  if (op == "MatMulNBits")
    return {{1, attrInt(n, "K", 0), attrInt(n, "N", 0), attrInt(n, "bits", 4)}};
  return {};
}

} // namespace orrery::onnx::detail
