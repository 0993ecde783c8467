//===- OnnxLoader.cpp - ONNX protobuf → GraphDesc
//--------------------------===//
//
// The exceptions island: protobuf and ONNX code live here and nowhere else.
// Every exception is caught at loadOnnxModelFromBytes and becomes a one-line
// error naming the file and the offending node or value.
//
// Steps: parse → check versions → bind symbolic dims → ONNX shape inference
// (opset ≤ 17, in a child process) → our own pass in node order: fold small
// constants, infer shapes with our rules (ONNX's result where we have none),
// classify weights, inline If branches whose condition folds → drop dead nodes.
//
//===----------------------------------------------------------------------===//

#include "ContribOps.h"
#include "Inference.h"
#include "InlineFunctions.h"
#include "IsolatedInference.h"
#include "orrery/CostModel/InputFile.h"
#include "orrery/CostModel/PrintableLine.h"
#include "orrery/Onnx/GraphDesc.h"

#include "onnx/defs/parser.h"
#include "onnx/defs/schema.h"
#include "onnx/onnx_pb.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace orrery::onnx {
using detail::describe;
using detail::LoadError;

const char *elemTypeName(ElemType type) {
  switch (type) {
  case ElemType::Float:
    return "float32";
  case ElemType::UInt8:
    return "uint8";
  case ElemType::Int8:
    return "int8";
  case ElemType::UInt16:
    return "uint16";
  case ElemType::Int16:
    return "int16";
  case ElemType::Int32:
    return "int32";
  case ElemType::Int64:
    return "int64";
  case ElemType::String:
    return "string";
  case ElemType::Bool:
    return "bool";
  case ElemType::Float16:
    return "float16";
  case ElemType::Double:
    return "float64";
  case ElemType::UInt32:
    return "uint32";
  case ElemType::UInt64:
    return "uint64";
  case ElemType::Complex64:
    return "complex64";
  case ElemType::Complex128:
    return "complex128";
  case ElemType::BFloat16:
    return "bfloat16";
  case ElemType::Float8E4M3FN:
    return "float8e4m3fn";
  case ElemType::Float8E4M3FNUZ:
    return "float8e4m3fnuz";
  case ElemType::Float8E5M2:
    return "float8e5m2";
  case ElemType::Float8E5M2FNUZ:
    return "float8e5m2fnuz";
  case ElemType::UInt4:
    return "uint4";
  case ElemType::Int4:
    return "int4";
  case ElemType::Float4E2M1:
    return "float4e2m1";
  default:
    return "undefined";
  }
}

int64_t elemTypeBits(ElemType type) {
  switch (type) {
  case ElemType::Float16:
  case ElemType::BFloat16:
  case ElemType::Int16:
  case ElemType::UInt16:
    return 16;
  case ElemType::Float:
  case ElemType::Int32:
  case ElemType::UInt32:
    return 32;
  case ElemType::Double:
  case ElemType::Int64:
  case ElemType::UInt64:
  case ElemType::Complex64:
    return 64;
  case ElemType::Complex128:
    return 128;
  case ElemType::UInt4:
  case ElemType::Int4:
  case ElemType::Float4E2M1:
    return 4;
  default:
    return 8;
  }
}

ElemType elemTypeFromOnnx(int32_t t) {
  if (t < 0 || t > int32_t(ElemType::Float4E2M1))
    return ElemType::Undefined;
  return static_cast<ElemType>(t);
}

int64_t saturatingInt64(double v) {
  if (std::isnan(v))
    return 0;
  if (v >= 0x1p63)
    return std::numeric_limits<int64_t>::max();
  if (v < -0x1p63)
    return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

bool isFloatElemType(ElemType t) {
  switch (t) {
  case ElemType::Float:
  case ElemType::Float16:
  case ElemType::BFloat16:
  case ElemType::Double:
  case ElemType::Float8E4M3FN:
  case ElemType::Float8E4M3FNUZ:
  case ElemType::Float8E5M2:
  case ElemType::Float8E5M2FNUZ:
  case ElemType::Float4E2M1:
    return true;
  default:
    return false;
  }
}

namespace {

constexpr int64_t kMinIr = 3, kMaxIr = 11, kMinOpset = 7, kMaxOpset = 23;
/// Float constants up to this many elements keep their values (scalars such
/// as epsilon); larger ones are buffers.
constexpr int64_t kMaxConstantElements = 4096;

/// Graphs inside graphs (If branches, Loop and Scan bodies), at most: the
/// loader, ONNX's text parser and the dialect recurse once per level.
/// Protobuf's own limit (100 nested messages, three per level) stops a
/// binary file near 33.
constexpr int kMaxGraphNesting = 64;

/// The deepest nesting of braces in ONNX text, outside string literals:
/// each nested graph's body is one level.
int textNesting(const std::string &text) {
  int depth = 0, deepest = 0;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quoted) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        quoted = false;
    } else if (c == '"') {
      quoted = true;
    } else if (c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == '}') {
      --depth;
    }
  }
  return deepest;
}

bool isFloat(ElemType t) { return isFloatElemType(t); }

ElemType toElemType(int32_t t) { return elemTypeFromOnnx(t); }

double halfToDouble(uint16_t h, bool bf16) {
  if (bf16) {
    uint32_t bits = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v = exp == 0    ? std::ldexp(mant, -24)
             : exp == 31 ? (mant ? NAN : INFINITY)
                         : std::ldexp(mant + 1024, exp - 25);
  return sign ? -v : v;
}

/// Values of a TensorProto; false when they live in external data.
bool readValues(const ::onnx::TensorProto &t, int64_t count,
                std::vector<double> &out, const std::string &what) {
  if (t.data_location() == ::onnx::TensorProto::EXTERNAL)
    return false;
  out.clear();
  ElemType type = toElemType(t.data_type());
  if (type == ElemType::Float8E4M3FN || type == ElemType::Float8E4M3FNUZ ||
      type == ElemType::Float8E5M2 || type == ElemType::Float8E5M2FNUZ)
    return false; // fp8 values never steer shapes; they stay weights
  if (t.has_raw_data()) {
    const std::string &raw = t.raw_data();
    int64_t bits = elemTypeBits(type);
    if ((int64_t)raw.size() != (count * bits + 7) / 8)
      throw LoadError(what + " has " + std::to_string(raw.size()) +
                      " bytes of data for " + std::to_string(count) +
                      " elements of " + elemTypeName(type));
    if (bits == 4) {
      // Two elements a byte, the first in the low nibble.
      for (int64_t i = 0; i < count; ++i) {
        int nibble = (uint8_t(raw[i / 2]) >> (4 * (i % 2))) & 0xf;
        out.push_back(type == ElemType::Int4 && nibble >= 8 ? nibble - 16
                                                            : nibble);
      }
      return type != ElemType::Float4E2M1;
    }
    int64_t size = bits / 8;
    const char *p = raw.data();
    for (int64_t i = 0; i < count; ++i, p += size) {
      switch (type) {
      case ElemType::Float: {
        float f;
        std::memcpy(&f, p, 4);
        out.push_back(f);
        break;
      }
      case ElemType::Double: {
        double d;
        std::memcpy(&d, p, 8);
        out.push_back(d);
        break;
      }
      case ElemType::Int64: {
        int64_t v;
        std::memcpy(&v, p, 8);
        out.push_back(double(v));
        break;
      }
      case ElemType::UInt64: {
        uint64_t v;
        std::memcpy(&v, p, 8);
        out.push_back(double(v));
        break;
      }
      case ElemType::Int32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        out.push_back(v);
        break;
      }
      case ElemType::UInt32: {
        uint32_t v;
        std::memcpy(&v, p, 4);
        out.push_back(v);
        break;
      }
      case ElemType::Int16: {
        int16_t v;
        std::memcpy(&v, p, 2);
        out.push_back(v);
        break;
      }
      case ElemType::UInt16: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        out.push_back(v);
        break;
      }
      case ElemType::Float16:
      case ElemType::BFloat16: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        out.push_back(halfToDouble(v, type == ElemType::BFloat16));
        break;
      }
      case ElemType::Int8:
        out.push_back(int8_t(*p));
        break;
      default:
        out.push_back(uint8_t(*p));
        break;
      }
    }
    return true;
  }
  auto take = [&](const auto &field) {
    for (auto v : field)
      out.push_back(double(v));
  };
  switch (type) {
  case ElemType::Float:
    take(t.float_data());
    break;
  case ElemType::Double:
    take(t.double_data());
    break;
  case ElemType::Int64:
    take(t.int64_data());
    break;
  case ElemType::UInt64:
  case ElemType::UInt32:
    take(t.uint64_data());
    break;
  case ElemType::Float16:
  case ElemType::BFloat16:
    for (int32_t v : t.int32_data())
      out.push_back(halfToDouble(uint16_t(v), type == ElemType::BFloat16));
    break;
  case ElemType::Int4:
  case ElemType::UInt4:
    // Two elements an entry, the first in the low nibble.
    for (int32_t v : t.int32_data())
      for (int half = 0; half < 2 && (int64_t)out.size() < count; ++half) {
        int nibble = (v >> (4 * half)) & 0xf;
        out.push_back(type == ElemType::Int4 && nibble >= 8 ? nibble - 16
                                                            : nibble);
      }
    break;
  case ElemType::Float4E2M1:
    return false;
  default:
    take(t.int32_data());
    break;
  }
  if ((int64_t)out.size() != count)
    throw LoadError(what + " has " + std::to_string(out.size()) +
                    " values for " + std::to_string(count) + " elements");
  return true;
}

ValueDesc tensorDesc(const ::onnx::TensorProto &t, const std::string &what) {
  ValueDesc v;
  v.name = t.name();
  v.type = toElemType(t.data_type());
  if (v.type == ElemType::Undefined)
    throw LoadError(what + " has unknown element type " +
                    std::to_string(t.data_type()));
  if (v.type == ElemType::String || v.type == ElemType::Complex64 ||
      v.type == ElemType::Complex128)
    throw LoadError(what + " has element type " + elemTypeName(v.type) +
                    ", which no GPU kernel Orrery prices computes on");
  int64_t elements = 1;
  for (int64_t d : t.dims()) {
    if (d < 0)
      throw LoadError(what + " has a negative dimension");
    if (d > 0 && elements > detail::kMaxTensorElements / d)
      throw LoadError(what + " has more than 2^50 elements");
    elements *= d;
    v.shape.push_back(d);
  }
  return v;
}

/// A chain of graphs, innermost first: subgraphs see enclosing values.
struct Scope {
  GraphDesc *graph;
  Scope *parent;
  const ValueDesc *lookup(const std::string &name) const {
    for (const Scope *s = this; s; s = s->parent) {
      auto it = s->graph->values.find(name);
      if (it != s->graph->values.end())
        return &it->second;
    }
    return nullptr;
  }
};

class Loader {
public:
  Loader(const LoadOptions &options, ModelDesc &model)
      : options(options), model(model) {}

  void run(::onnx::ModelProto &proto);

private:
  const LoadOptions &options;
  ModelDesc &model;
  /// Shapes the file states or ONNX inferred, by value name; used where we
  /// have no rule.
  std::map<std::string, ValueDesc> onnxInferred;
  const ::onnx::ModelProto *proto = nullptr;
  bool onnxInferenceRan = false;
  int graphNesting = 0; ///< processNodes calls in progress
  std::set<std::string> bnStatistics;
  std::set<std::string> initializerNames;
  /// Initializers read only as shape data (Resize's scales and roi,
  /// Upsample's scales, Range's bounds): constants, whatever their type.
  std::set<std::string> shapeData;
  /// Initializers holding weights stored as integers (ContribOps.h).
  std::map<std::string, detail::QuantizedWeight> quantizedWeights;
  void collectQuantizedWeights(const ::onnx::GraphProto &g);
  void processExpansion(detail::Expansion e, GraphDesc &out, Scope &scope);
  /// Values every use of which is a parameter slot (a Conv's weight and
  /// bias, BatchNorm's scale and statistics, ...).
  std::map<std::string, bool> onlyParameterSlots;
  /// Names every use of which is a Slice's data: a table the model reads
  /// by position (transformers 4.x's rotary `cos_cached[:seq_len]`).
  std::map<std::string, bool> onlySliced;

  void collectBnStatistics(const ::onnx::GraphProto &g);
  void readValueInfo(const ::onnx::GraphProto &g);
  const ValueDesc *shapeFromOnnx(const std::string &name);
  void addInitializers(const ::onnx::GraphProto &g, GraphDesc &out);
  void processNodes(const ::onnx::GraphProto &g, GraphDesc &out, Scope &scope,
                    const std::string &prefix);
  void processNode(const ::onnx::NodeProto &n, GraphDesc &out, Scope &scope,
                   const std::string &prefix);
  std::vector<const ValueDesc *> operands(NodeDesc &node, const GraphDesc &out,
                                          Scope &scope);
  void checkArity(const ::onnx::NodeProto &n, const NodeDesc &node);
  void processConstant(const NodeDesc &node, GraphDesc &out);
  bool processWeightPlaceholder(const NodeDesc &node,
                                const std::vector<const ValueDesc *> &inputs,
                                GraphDesc &out);
  void processIf(const ::onnx::NodeProto &n, NodeDesc node,
                 const std::vector<const ValueDesc *> &inputs, GraphDesc &out,
                 Scope &scope);
  void processLoop(const ::onnx::NodeProto &n, NodeDesc node,
                   const std::vector<const ValueDesc *> &inputs, GraphDesc &out,
                   Scope &scope);
  bool routedCount(const std::vector<const ValueDesc *> &inputs,
                   std::vector<ValueDesc> &outs);
  void passOneHot(const NodeDesc &node,
                  const std::vector<const ValueDesc *> &inputs,
                  std::vector<ValueDesc> &outs);
  void processComputed(NodeDesc node,
                       const std::vector<const ValueDesc *> &inputs,
                       GraphDesc &out);
  std::shared_ptr<GraphDesc> processSubgraph(const ::onnx::GraphProto &g,
                                             Scope &scope,
                                             const std::vector<ValueDesc> &args,
                                             const NodeDesc &owner);
  NodeDesc convertNode(const ::onnx::NodeProto &n, const std::string &prefix);
  void addValue(GraphDesc &out, ValueDesc v);
};

void Loader::addValue(GraphDesc &out, ValueDesc v) {
  std::string name = v.name;
  out.values[name] = std::move(v);
}

void Loader::collectBnStatistics(const ::onnx::GraphProto &g) {
  for (const auto &n : g.node()) {
    if (n.op_type() == "BatchNormalization")
      for (int i = 3; i < n.input_size() && i < 5; ++i)
        bnStatistics.insert(n.input(i));
    for (const auto &a : n.attribute()) {
      if (a.has_g())
        collectBnStatistics(a.g());
      for (const auto &sg : a.graphs())
        collectBnStatistics(sg);
    }
  }
}

/// The data a TensorProto holds matches its shape: raw bytes for every
/// element, or that many entries of the typed field its type uses. A weight
/// is never read, so without this a truncated one loads silently. No data
/// at all (a file with its weights stripped), external data and one typed
/// entry for every element (how ONNX's text syntax writes a fill, `{0.0}`)
/// pass.
void checkTensorData(const ::onnx::TensorProto &t, int64_t count,
                     const std::string &what) {
  if (t.data_location() == ::onnx::TensorProto::EXTERNAL)
    return;
  ElemType type = toElemType(t.data_type());
  int64_t bits = elemTypeBits(type);
  if (t.has_raw_data()) {
    if (bits > 0 && (int64_t)t.raw_data().size() != (count * bits + 7) / 8)
      throw LoadError(what + " has " + std::to_string(t.raw_data().size()) +
                      " bytes of data for " + std::to_string(count) +
                      " elements of " + elemTypeName(type));
    return;
  }
  int64_t entries = 0, want = count;
  switch (type) {
  case ElemType::Float:
    entries = t.float_data_size();
    break;
  case ElemType::Double:
    entries = t.double_data_size();
    break;
  case ElemType::Int64:
    entries = t.int64_data_size();
    break;
  case ElemType::UInt32:
  case ElemType::UInt64:
    entries = t.uint64_data_size();
    break;
  default:
    if (bits <= 0 || bits > 32)
      return;
    entries = t.int32_data_size();
    if (bits == 4)
      want = (count + 1) / 2; // two elements an entry
    break;
  }
  if (entries != 0 && entries != 1 && entries != want)
    throw LoadError(what + " has " + std::to_string(entries) +
                    " data entries for " + std::to_string(count) +
                    " elements of " + elemTypeName(type));
}

/// A head TorchScript or onnxruntime folded (`onnx::...`, `/...`): the
/// weights the importer may tie back to an embedding table.
static bool foldedName(const std::string &name) {
  return name.rfind("onnx::", 0) == 0 || name.rfind("/", 0) == 0;
}

/// The elements' digest of ValueDesc::elementsDigest: a sum of each
/// element's mixed bytes (splitmix64), so the order does not count; 0 when
/// the data is not in the file.
static uint64_t elementsDigest(const ::onnx::TensorProto &t, int64_t count) {
  if (t.data_location() == ::onnx::TensorProto::EXTERNAL || count <= 0)
    return 0;
  auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  };
  uint64_t sum = 0;
  if (!t.has_raw_data()) { // floats written as typed entries
    if (t.data_type() != ::onnx::TensorProto::FLOAT ||
        t.float_data_size() != count)
      return 0;
    for (float f : t.float_data()) {
      uint32_t bits32;
      std::memcpy(&bits32, &f, 4);
      sum += mix(bits32);
    }
    return sum ? sum : 1;
  }
  int64_t bits = elemTypeBits(toElemType(t.data_type()));
  if (bits < 8 || bits % 8 || bits > 64)
    return 0;
  size_t size = size_t(bits / 8);
  const std::string &raw = t.raw_data();
  for (size_t at = 0; at + size <= raw.size(); at += size) {
    uint64_t x = 0;
    std::memcpy(&x, raw.data() + at, size);
    sum += mix(x);
  }
  return sum ? sum : 1;
}

void Loader::addInitializers(const ::onnx::GraphProto &g, GraphDesc &out) {
  // The element counts of the folded matrices that may be tied heads: only
  // matrices of those counts are digested (the heads and their tables).
  std::set<int64_t> headCounts;
  for (const auto &t : g.initializer())
    if (t.dims_size() == 2 && foldedName(t.name()) && t.dims(0) > 0 &&
        t.dims(1) > 0 && t.dims(0) <= detail::kMaxTensorElements / t.dims(1))
      headCounts.insert(t.dims(0) * t.dims(1));
  for (const auto &t : g.initializer()) {
    std::string what = "initializer '" + t.name() + "'";
    if (t.name().empty())
      throw LoadError("an initializer has no name");
    ValueDesc v = tensorDesc(t, what);
    checkTensorData(t, v.numElements(), what);
    initializerNames.insert(t.name());
    if (auto q = quantizedWeights.find(t.name()); q != quantizedWeights.end()) {
      // A weight stored as integers: a parameter at its stored width;
      // MatMulNBits' packed blocks as the [K, N] matrix of 4-bit (or 8-bit)
      // elements they hold.
      const detail::QuantizedWeight &w = q->second;
      if (w.bits) {
        if ((w.bits != 4 && w.bits != 8) || w.rows <= 0 || w.cols <= 0 ||
            w.rows > detail::kMaxTensorElements / w.cols)
          throw LoadError(what + ": MatMulNBits with K=" +
                          std::to_string(w.rows) + ", N=" +
                          std::to_string(w.cols) + ", bits=" +
                          std::to_string(w.bits) +
                          ": only 4- and 8-bit blocks of a positive K x N are "
                          "priced");
        v.shape = {w.rows, w.cols};
        v.type = w.bits == 4 ? ElemType::UInt4 : ElemType::UInt8;
      }
      v.values.clear();
      v.kind = ValueKind::Param;
    } else if (isFloat(v.type) &&
               (v.numElements() == 1 || shapeData.count(t.name())) &&
               v.numElements() <= detail::kMaxFoldElements &&
               readValues(t, v.numElements(), v.values, what)) {
      // A one-element float (an epsilon, a fill value, a scale), or floats
      // only ever read as shape data (Resize's scales folded into an
      // initializer by onnx-simplifier or onnxruntime's pre-processing, as
      // YOLOv8 exports ship), is a constant the graph computes with, not a
      // weight.
      v.kind = ValueKind::Constant;
    } else if (isFloat(v.type)) {
      v.values.clear();
      v.kind =
          bnStatistics.count(t.name()) ? ValueKind::Buffer : ValueKind::Param;
      if (v.shape.size() == 2 && headCounts.count(v.numElements()))
        v.elementsDigest = elementsDigest(t, v.numElements());
    } else if (v.numElements() <= detail::kMaxFoldElements &&
               readValues(t, v.numElements(), v.values, what)) {
      v.kind = ValueKind::Constant;
    } else {
      // Large integer tables (or integers in external data) are buffers.
      v.kind = ValueKind::Buffer;
    }
    addValue(out, std::move(v));
  }
}

void Loader::collectQuantizedWeights(const ::onnx::GraphProto &g) {
  // An embedding table the quantizer stored as 8- or 4-bit integers (a
  // Gather, then DequantizeLinear of the rows it read).
  std::set<std::string> narrowInts;
  for (const auto &t : g.initializer())
    if (ElemType e = toElemType(t.data_type());
        e == ElemType::Int8 || e == ElemType::UInt8 || e == ElemType::Int4 ||
        e == ElemType::UInt4)
      narrowInts.insert(t.name());
  std::map<std::string, bool> onlyShapeData;
  for (const auto &n : g.node())
    for (int i = 0; i < n.input_size(); ++i) {
      const std::string &op = n.op_type();
      bool data = ((op == "Resize" && (i == 1 || i == 2)) ||
                   (op == "Upsample" && i == 1) || op == "Range") &&
                  n.domain().empty();
      auto [it, inserted] = onlyShapeData.try_emplace(n.input(i), data);
      if (!inserted)
        it->second = it->second && data;
    }
  for (const auto &[name, data] : onlyShapeData)
    if (data)
      shapeData.insert(name);
  for (const auto &n : g.node()) {
    if (n.op_type() == "Gather" && n.input_size() > 0 &&
        narrowInts.count(n.input(0)))
      quantizedWeights.emplace(n.input(0), detail::QuantizedWeight{0});
    NodeDesc node = convertNode(n, "");
    for (const detail::QuantizedWeight &w : detail::quantizedWeights(node))
      if (w.input < node.inputs.size() && !node.inputs[w.input].empty())
        quantizedWeights.emplace(node.inputs[w.input], w);
  }
}

/// A contrib or quantized node's standard nodes, each through the rules,
/// its outputs typed as the contrib op types them.
void Loader::processExpansion(detail::Expansion e, GraphDesc &out,
                              Scope &scope) {
  for (ValueDesc &c : e.constants)
    addValue(out, std::move(c));
  for (NodeDesc &d : e.nodes) {
    std::vector<const ValueDesc *> inputs = operands(d, out, scope);
    processComputed(std::move(d), inputs, out);
  }
  for (const auto &[name, type] : e.outputTypes)
    if (auto it = out.values.find(name); it != out.values.end())
      it->second.type = type;
}

void Loader::readValueInfo(const ::onnx::GraphProto &g) {
  std::vector<const ::onnx::ValueInfoProto *> infos;
  for (const auto &vi : g.value_info())
    infos.push_back(&vi);
  for (const auto &vi : g.output()) // ONNX writes outputs' shapes here
    infos.push_back(&vi);
  for (const ::onnx::ValueInfoProto *info : infos) {
    const ::onnx::ValueInfoProto &vi = *info;
    if (!vi.type().has_tensor_type())
      continue;
    const auto &tt = vi.type().tensor_type();
    if (!tt.has_shape())
      continue;
    ValueDesc v;
    v.name = vi.name();
    v.type = toElemType(tt.elem_type());
    bool complete = v.type != ElemType::Undefined;
    int64_t elements = 1;
    for (const auto &d : tt.shape().dim()) {
      // A file's value_info is untrusted: negative or huge dims are no
      // shape (our rules then infer it, or the node is an error).
      int64_t dim = d.has_dim_value() ? d.dim_value() : -1;
      if (dim < 0 || (dim > 0 && elements > detail::kMaxTensorElements / dim)) {
        complete = false;
        break;
      }
      elements *= dim;
      v.shape.push_back(dim);
    }
    if (complete)
      onnxInferred.try_emplace(v.name, std::move(v));
  }
}

// ONNX's shape inference knows opsets up to 17 (on newer files it may skip
// nodes, which is fine). It runs once, and only for a file with a node our
// rules do not cover, in a child process: its crashes on hostile files cost
// only its shapes, and a node neither covers is reported by the caller.
const ValueDesc *Loader::shapeFromOnnx(const std::string &name) {
  auto it = onnxInferred.find(name);
  if (it == onnxInferred.end() && !onnxInferenceRan &&
      model.opsetVersion <= 17) {
    onnxInferenceRan = true;
    ::onnx::GraphProto shapes;
    if (detail::inferShapesIsolated(*proto, shapes))
      readValueInfo(shapes);
    it = onnxInferred.find(name);
  }
  return it == onnxInferred.end() ? nullptr : &it->second;
}

NodeDesc Loader::convertNode(const ::onnx::NodeProto &n,
                             const std::string &prefix) {
  NodeDesc node;
  node.opType = n.op_type();
  node.domain = n.domain() == "ai.onnx" ? "" : n.domain();
  node.name = n.name().empty()
                  ? prefix + n.op_type() + "_" +
                        (n.output_size() ? n.output(0) : std::string("?"))
                  : n.name();
  node.inputs.assign(n.input().begin(), n.input().end());
  node.outputs.assign(n.output().begin(), n.output().end());
  if (node.opType.empty())
    throw LoadError(describe(node) + ": node has no op_type");
  for (const auto &a : n.attribute()) {
    AttrDesc d;
    d.name = a.name();
    using AP = ::onnx::AttributeProto;
    switch (a.type()) {
    case AP::INT:
      d.kind = AttrDesc::Kind::Int;
      d.i = a.i();
      break;
    case AP::FLOAT:
      d.kind = AttrDesc::Kind::Float;
      d.f = a.f();
      break;
    case AP::STRING:
      d.kind = AttrDesc::Kind::String;
      d.s = a.s();
      break;
    case AP::INTS:
      d.kind = AttrDesc::Kind::Ints;
      d.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case AP::FLOATS:
      d.kind = AttrDesc::Kind::Floats;
      d.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case AP::STRINGS:
      d.kind = AttrDesc::Kind::Strings;
      d.strings.assign(a.strings().begin(), a.strings().end());
      break;
    case AP::TENSOR: {
      d.kind = AttrDesc::Kind::Tensor;
      std::string what = describe(node) + " attribute '" + a.name() + "'";
      d.tensor = tensorDesc(a.t(), what);
      if (d.tensor.numElements() <= kMaxConstantElements &&
          !readValues(a.t(), d.tensor.numElements(), d.tensor.values, what))
        d.tensor.values.clear();
      break;
    }
    case AP::GRAPH:
      d.kind = AttrDesc::Kind::Graph;
      break; // filled later
    case AP::UNDEFINED:
      // Old exporters leave the type unset; infer it from the filled field.
      if (a.has_i()) {
        d.kind = AttrDesc::Kind::Int;
        d.i = a.i();
      } else if (a.has_f()) {
        d.kind = AttrDesc::Kind::Float;
        d.f = a.f();
      } else if (a.has_s()) {
        d.kind = AttrDesc::Kind::String;
        d.s = a.s();
      } else if (a.ints_size()) {
        d.kind = AttrDesc::Kind::Ints;
        d.ints.assign(a.ints().begin(), a.ints().end());
      } else if (a.floats_size()) {
        d.kind = AttrDesc::Kind::Floats;
        d.floats.assign(a.floats().begin(), a.floats().end());
      } else
        continue;
      break;
    default:
      continue; // sparse tensors, type protos: no bearing on cost
    }
    node.attrs.push_back(std::move(d));
  }
  return node;
}

std::shared_ptr<GraphDesc>
Loader::processSubgraph(const ::onnx::GraphProto &g, Scope &scope,
                        const std::vector<ValueDesc> &args,
                        const NodeDesc &owner) {
  auto sub = std::make_shared<GraphDesc>();
  sub->name = g.name();
  if ((size_t)g.input_size() != args.size())
    throw LoadError(describe(owner) + ": body '" + g.name() + "' takes " +
                    std::to_string(g.input_size()) + " inputs, expected " +
                    std::to_string(args.size()));
  for (int i = 0; i < g.input_size(); ++i) {
    ValueDesc v = args[i];
    v.name = g.input(i).name();
    v.kind = ValueKind::Input;
    v.values.clear();
    sub->inputs.push_back(v.name);
    addValue(*sub, std::move(v));
  }
  addInitializers(g, *sub);
  Scope inner{sub.get(), &scope};
  processNodes(g, *sub, inner, owner.name + "/");
  for (const auto &o : g.output()) {
    if (!inner.lookup(o.name()))
      throw LoadError(describe(owner) + ": body output '" + o.name() +
                      "' is never defined");
    sub->outputs.push_back(o.name());
  }
  return sub;
}

void Loader::processNodes(const ::onnx::GraphProto &g, GraphDesc &out,
                          Scope &scope, const std::string &prefix) {
  if (++graphNesting > kMaxGraphNesting)
    throw LoadError("graph '" + g.name() + "': graphs nested deeper than " +
                    std::to_string(kMaxGraphNesting) + " levels");
  for (const auto &n : g.node())
    processNode(n, out, scope, prefix);
  --graphNesting;
}

/// The node's operands in scope (null for an empty name; trailing empty
/// ones dropped), after checking that its outputs are new.
std::vector<const ValueDesc *>
Loader::operands(NodeDesc &node, const GraphDesc &out, Scope &scope) {
  std::vector<const ValueDesc *> inputs;
  for (const std::string &name : node.inputs) {
    if (name.empty()) {
      inputs.push_back(nullptr);
      continue;
    }
    const ValueDesc *v = scope.lookup(name);
    if (!v)
      throw LoadError(describe(node) + ": uses undefined value '" + name + "'");
    inputs.push_back(v);
  }
  while (!inputs.empty() && !inputs.back()) {
    inputs.pop_back();
    node.inputs.pop_back();
  }
  for (const std::string &o : node.outputs)
    if (!o.empty() && out.values.count(o))
      throw LoadError(describe(node) + ": redefines value '" + o + "'");
  return inputs;
}

/// Arity against ONNX's schema, before any rule or fold reads an operand
/// (ONNX 1.12 knows opsets to 17; newer files rely on our rules' checks).
void Loader::checkArity(const ::onnx::NodeProto &n, const NodeDesc &node) {
  const bool defaultDomain = node.domain.empty();
  if (node.outputs.empty())
    throw LoadError(describe(node) + ": has no outputs");
  if (model.opsetVersion <= 17)
    if (const ::onnx::OpSchema *schema = ::onnx::OpSchemaRegistry::Schema(
            node.opType, model.opsetVersion,
            defaultDomain ? "" : node.domain)) {
      int ins = n.input_size(), outs = n.output_size();
      if (ins < schema->min_input() || ins > schema->max_input())
        throw LoadError(describe(node) + ": takes " +
                        std::to_string(schema->min_input()) + " to " +
                        std::to_string(schema->max_input()) + " inputs, has " +
                        std::to_string(ins));
      if (outs < schema->min_output() || outs > schema->max_output())
        throw LoadError(describe(node) + ": gives " +
                        std::to_string(schema->min_output()) + " to " +
                        std::to_string(schema->max_output()) +
                        " outputs, has " + std::to_string(outs));
    }
}

/// A Constant: small ones keep their values, large float ones are buffers.
void Loader::processConstant(const NodeDesc &node, GraphDesc &out) {
  if (node.outputs.size() != 1 || node.attrs.empty())
    throw LoadError(describe(node) +
                    ": needs one output and one value attribute");
  const AttrDesc &a = node.attrs[0];
  ValueDesc v;
  v.name = node.outputs[0];
  if (a.name == "value" && a.kind == AttrDesc::Kind::Tensor) {
    v.type = a.tensor.type;
    v.shape = a.tensor.shape;
    v.values = a.tensor.values;
  } else if (a.name == "value_float") {
    v.type = ElemType::Float;
    v.values = {a.f};
  } else if (a.name == "value_int") {
    v.type = ElemType::Int64;
    v.values = {double(a.i)};
  } else if (a.name == "value_floats") {
    v.type = ElemType::Float;
    v.shape = {(int64_t)a.floats.size()};
    v.values = a.floats;
  } else if (a.name == "value_ints") {
    v.type = ElemType::Int64;
    v.shape = {(int64_t)a.ints.size()};
    for (int64_t i : a.ints)
      v.values.push_back(double(i));
  } else
    throw LoadError(describe(node) + ": unsupported constant attribute '" +
                    a.name + "'");
  // Weights held in Constant nodes (Paddle2ONNX writes every weight so):
  // a float tensor too large to keep, or one only parameter slots read.
  auto slot = onlyParameterSlots.find(v.name);
  bool weightSlot = slot != onlyParameterSlots.end() && slot->second;
  bool complete = (int64_t)v.values.size() == v.numElements();
  // A traced table read only by position (a rotary cache a TorchScript
  // export holds as a Constant: `cos_cached[:seq_len]`) is the model's
  // buffer, computed from its config, not a parameter.
  auto sliced = onlySliced.find(v.name);
  bool positionTable = sliced != onlySliced.end() && sliced->second;
  if (isFloat(v.type) && !complete && positionTable && !weightSlot) {
    v.kind = ValueKind::Buffer;
    v.values.clear();
  } else if (isFloat(v.type) &&
             (!complete || (weightSlot && v.numElements() > 1))) {
    v.kind = bnStatistics.count(v.name) ? ValueKind::Buffer : ValueKind::Param;
    v.values.clear();
  } else {
    v.kind = complete ? ValueKind::Constant : ValueKind::Buffer;
  }
  if (v.kind != ValueKind::Constant)
    out.weights.push_back(v.name);
  addValue(out, std::move(v));
}

/// A weight placeholder: ConstantOfShape fed directly by an initializer (the
/// way ONNX's "light" test models strip their weights). False: not one.
bool Loader::processWeightPlaceholder(
    const NodeDesc &node, const std::vector<const ValueDesc *> &inputs,
    GraphDesc &out) {
  std::vector<ValueDesc> outs;
  detail::inferNode(node, model.opsetVersion, inputs, outs);
  if (isFloat(outs[0].type)) {
    outs[0].kind = bnStatistics.count(node.outputs[0]) ? ValueKind::Buffer
                                                       : ValueKind::Param;
    outs[0].values.clear();
    addValue(out, std::move(outs[0]));
    return true;
  }
  return false;
}

/// If: a constant condition inlines the taken branch; otherwise both
/// branches are kept as subgraphs.
void Loader::processIf(const ::onnx::NodeProto &n, NodeDesc node,
                       const std::vector<const ValueDesc *> &inputs,
                       GraphDesc &out, Scope &scope) {
  const ::onnx::GraphProto *thenG = nullptr, *elseG = nullptr;
  for (const auto &a : n.attribute()) {
    if (a.name() == "then_branch")
      thenG = &a.g();
    if (a.name() == "else_branch")
      elseG = &a.g();
  }
  if (!thenG || !elseG || inputs.empty() || !inputs[0])
    throw LoadError(describe(node) + ": needs a condition and two branches");
  const ValueDesc &cond = *inputs[0];
  if (cond.kind == ValueKind::Constant && cond.values.size() == 1) {
    const ::onnx::GraphProto &taken = cond.values[0] != 0 ? *thenG : *elseG;
    addInitializers(taken, out);
    processNodes(taken, out, scope, node.name + "/");
    if ((size_t)taken.output_size() != node.outputs.size())
      throw LoadError(describe(node) + ": branch output count differs");
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      const ValueDesc *src = scope.lookup(taken.output(i).name());
      if (!src)
        throw LoadError(describe(node) + ": branch output '" +
                        taken.output(i).name() + "' is never defined");
      ValueDesc alias = *src;
      alias.name = node.outputs[i];
      if (alias.kind == ValueKind::Param || alias.kind == ValueKind::Buffer ||
          alias.kind == ValueKind::Input || alias.kind == ValueKind::Computed) {
        // Keep the dataflow with an Identity node.
        NodeDesc id;
        id.name = node.name + "/output_" + std::to_string(i);
        id.opType = "Identity";
        id.inputs = {src->name};
        id.outputs = {alias.name};
        alias.kind = ValueKind::Computed;
        out.nodes.push_back(id);
      }
      addValue(out, std::move(alias));
    }
    return;
  }
  for (AttrDesc &a : node.attrs) {
    if (a.kind != AttrDesc::Kind::Graph)
      continue;
    a.graph = processSubgraph(a.name == "then_branch" ? *thenG : *elseG, scope,
                              {}, node);
  }
  const GraphDesc *thenD = nullptr;
  for (AttrDesc &a : node.attrs)
    if (a.name == "then_branch")
      thenD = a.graph.get();
  if (!thenD || thenD->outputs.size() != node.outputs.size())
    throw LoadError(describe(node) + ": branch output count differs");
  Scope thenScope{const_cast<GraphDesc *>(thenD), &scope};
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    ValueDesc v = *thenScope.lookup(thenD->outputs[i]);
    v.name = node.outputs[i];
    v.kind = ValueKind::Computed;
    v.values.clear();
    addValue(out, std::move(v));
  }
  out.nodes.push_back(std::move(node));
}

/// Loop and Scan keep their bodies; shapes come from the body.
void Loader::processLoop(const ::onnx::NodeProto &n, NodeDesc node,
                         const std::vector<const ValueDesc *> &inputs,
                         GraphDesc &out, Scope &scope) {
  const ::onnx::GraphProto *body = nullptr;
  for (const auto &a : n.attribute())
    if (a.name() == "body")
      body = &a.g();
  if (!body)
    throw LoadError(describe(node) + ": has no body");
  std::vector<ValueDesc> args;
  int64_t trip = -1;
  size_t numState = 0, numScanIn = 0;
  if (node.opType == "Loop") {
    if (inputs.size() < 2)
      throw LoadError(describe(node) + ": needs a trip count and a condition");
    if (inputs[0] && inputs[0]->kind == ValueKind::Constant &&
        !inputs[0]->values.empty())
      trip = inputs[0]->values[0] >= 0 && inputs[0]->values[0] < 1e15
                 ? int64_t(inputs[0]->values[0])
                 : -1;
    ValueDesc iter;
    iter.type = ElemType::Int64;
    ValueDesc cond;
    cond.type = ElemType::Bool;
    args = {iter, cond};
    for (size_t i = 2; i < inputs.size(); ++i) {
      if (!inputs[i])
        throw LoadError(describe(node) + ": empty loop-carried input");
      args.push_back(*inputs[i]);
    }
    numState = inputs.size() - 2;
  } else {
    numScanIn = detail::attrInt(node, "num_scan_inputs", 0);
    if (numScanIn > inputs.size())
      throw LoadError(describe(node) + ": num_scan_inputs exceeds its inputs");
    numState = inputs.size() - numScanIn;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i])
        throw LoadError(describe(node) + ": empty scan input");
      ValueDesc v = *inputs[i];
      if (i >= numState) {
        if (v.shape.empty())
          throw LoadError(describe(node) + ": scan input is a scalar");
        trip = v.shape[0];
        v.shape.erase(v.shape.begin());
      }
      args.push_back(v);
    }
  }
  auto sub = processSubgraph(*body, scope, args, node);
  for (AttrDesc &a : node.attrs)
    if (a.name == "body")
      a.graph = sub;
  Scope bodyScope{sub.get(), &scope};
  size_t firstOut =
      node.opType == "Loop" ? 1 : 0; // Loop's body returns cond first
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    size_t bi = firstOut + i;
    if (bi >= sub->outputs.size())
      throw LoadError(describe(node) + ": body has too few outputs");
    ValueDesc v = *bodyScope.lookup(sub->outputs[bi]);
    v.name = node.outputs[i];
    v.kind = ValueKind::Computed;
    v.values.clear();
    if (i >= numState) {
      if (trip < 0)
        throw LoadError(describe(node) +
                        ": trip count is not a constant, so "
                        "the shape of output '" +
                        v.name + "' is unknown");
      v.shape.insert(v.shape.begin(), trip);
    }
    addValue(out, std::move(v));
  }
  out.nodes.push_back(std::move(node));
}

void Loader::processNode(const ::onnx::NodeProto &n, GraphDesc &out,
                         Scope &scope, const std::string &prefix) {
  NodeDesc node = convertNode(n, prefix);
  std::vector<const ValueDesc *> inputs = operands(node, out, scope);
  checkArity(n, node);
  const bool defaultDomain = node.domain.empty();
  if (defaultDomain && node.opType == "Constant")
    return processConstant(node, out);
  if (defaultDomain && node.opType == "ConstantOfShape" &&
      !node.inputs.empty() && initializerNames.count(node.inputs[0]) &&
      processWeightPlaceholder(node, inputs, out))
    return;
  if (defaultDomain && node.opType == "If")
    return processIf(n, std::move(node), inputs, out, scope);
  if (defaultDomain && (node.opType == "Loop" || node.opType == "Scan"))
    return processLoop(n, std::move(node), inputs, out, scope);
  if (std::optional<detail::Expansion> e =
          detail::expandContribOp(node, inputs))
    return processExpansion(std::move(*e), out, scope);
  processComputed(std::move(node), inputs, out);
}

/// NonZero of a router's expert mask (transformers' per-expert loop:
/// `torch.where(one_hot(top_k_index)[e])`): the positions of the tokens
/// routed to one expert, as many as balanced routing sends it (the mask's
/// elements times its one-hot density). False for any other input.
bool Loader::routedCount(const std::vector<const ValueDesc *> &inputs,
                         std::vector<ValueDesc> &outs) {
  if (inputs.size() != 1 || !inputs[0] || inputs[0]->oneHotDensity <= 0 ||
      inputs[0]->shape.empty())
    return false;
  for (int64_t d : inputs[0]->shape)
    if (d < 0)
      return false;
  ValueDesc v;
  v.type = ElemType::Int64;
  v.shape = {int64_t(inputs[0]->shape.size()),
             int64_t(std::ceil(double(inputs[0]->numElements()) *
                               inputs[0]->oneHotDensity))};
  outs.push_back(std::move(v));
  return true;
}

/// Marks a OneHot's output with its density, and passes the density on
/// through the views, casts and gathers of it.
void Loader::passOneHot(const NodeDesc &node,
                        const std::vector<const ValueDesc *> &inputs,
                        std::vector<ValueDesc> &outs) {
  if (outs.empty() || inputs.empty() || !inputs[0])
    return;
  static const std::set<std::string> kViews{
      "Transpose", "Cast",  "Gather",  "Reshape", "Squeeze",
      "Unsqueeze", "Slice", "Flatten", "Identity"};
  double in = inputs[0]->oneHotDensity;
  int64_t n = inputs[0]->numElements(), m = outs[0].numElements();
  if (node.opType == "OneHot" && m > 0 && n > 0)
    outs[0].oneHotDensity = double(n) / double(m);
  else if (kViews.count(node.opType))
    outs[0].oneHotDensity = in;
  else if ((node.opType == "ReduceSum" || node.opType == "ReduceMax") &&
           in > 0 && m > 0)
    // Per output, how often any of its n/m inputs is set: the experts a
    // batch hits (`greater(mask.sum(...), 0)`), all of them when n/m
    // tokens x k spread evenly.
    outs[0].oneHotDensity = std::min(1.0, in * double(n) / double(m));
  else if ((node.opType == "Greater" || node.opType == "NotEqual") && in > 0 &&
           inputs.size() == 2 && inputs[1] && !inputs[1]->values.empty() &&
           std::all_of(inputs[1]->values.begin(), inputs[1]->values.end(),
                       [](double v) { return v == 0; }))
    outs[0].oneHotDensity = in; // which counts are not zero
}

/// Any other op: its outputs from our shape rules, else as the file
/// states them.
void Loader::processComputed(NodeDesc node,
                             const std::vector<const ValueDesc *> &inputs,
                             GraphDesc &out) {
  const bool defaultDomain = node.domain.empty();
  std::vector<ValueDesc> outs;
  bool inferred = false;
  if (defaultDomain && node.opType == "NonZero")
    inferred = routedCount(inputs, outs);
  if (defaultDomain && !inferred) {
    try {
      inferred = detail::inferNode(node, model.opsetVersion, inputs, outs);
    } catch (const detail::NotConstantError &e) {
      // Values computed in a subgraph our folding does not follow: the
      // shapes the file or ONNX's inference states, else this error.
      for (const std::string &o : node.outputs)
        if (!o.empty() && !shapeFromOnnx(o))
          throw;
    }
  }
  if (!inferred) {
    outs.clear();
    for (const std::string &o : node.outputs) {
      if (o.empty()) {
        outs.emplace_back();
        continue;
      }
      const ValueDesc *shape = shapeFromOnnx(o);
      // An operator of the default domain that ONNX's opset (to 17, what
      // ONNX 1.12 knows) does not define is not ONNX: refused even when the
      // file states its shape.
      bool defined = ::onnx::OpSchemaRegistry::Schema(
                         node.opType, model.opsetVersion,
                         defaultDomain ? "" : node.domain) != nullptr;
      if (defaultDomain && model.opsetVersion <= 17 && !defined)
        throw LoadError(describe(node) + ": unsupported op: ONNX opset " +
                        std::to_string(model.opsetVersion) + " defines no '" +
                        node.opType + "'");
      if (!shape) {
        // An operator ONNX itself does not know is unsupported; a known one
        // whose shape ONNX could not work out either is a shape problem.
        bool known = defined;
        // Ops whose output size is in the data: only a file that states
        // the shape (value_info) can be priced.
        bool dataDependent =
            defaultDomain &&
            (node.opType == "NonZero" || node.opType == "Compress" ||
             node.opType == "Unique" || node.opType == "NonMaxSuppression");
        throw LoadError(
            describe(node) +
            (dataDependent ? ": the size of output '" + o +
                                 "' depends on the data and the file states "
                                 "no shape for it"
             : known ? ": cannot infer the shape of output '" + o + "'"
                     : ": unsupported op" +
                           (defaultDomain ? ""
                                          : " (domain '" + node.domain + "')") +
                           "; the file gives no shape for its output '" + o +
                           "' (add it to value_info to import it as an opaque "
                           "op)"));
      }
      outs.push_back(*shape);
    }
  }
  if (defaultDomain)
    passOneHot(node, inputs, outs);
  bool allConstant = true;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (node.outputs[i].empty())
      continue;
    outs[i].name = node.outputs[i];
    if (outs[i].kind != ValueKind::Constant) {
      outs[i].kind = ValueKind::Computed;
      allConstant = false;
    }
  }
  for (size_t i = 0; i < outs.size(); ++i)
    if (!node.outputs[i].empty())
      addValue(out, std::move(outs[i]));
  if (!allConstant)
    out.nodes.push_back(std::move(node));
}

/// Keeps the nodes whose outputs reach the graph outputs; records the
/// weights and constants the kept nodes use. Returns names used from
/// enclosing scopes.
void pruneGraph(GraphDesc &g, std::set<std::string> &usedOutside) {
  std::set<std::string> live(g.outputs.begin(), g.outputs.end());
  std::vector<bool> keep(g.nodes.size(), false);
  std::vector<std::set<std::string>> nodeUses(g.nodes.size());
  for (size_t i = g.nodes.size(); i-- > 0;) {
    NodeDesc &n = g.nodes[i];
    bool needed = false;
    for (const std::string &o : n.outputs)
      needed |= !o.empty() && live.count(o);
    if (!needed)
      continue;
    keep[i] = true;
    for (const std::string &in : n.inputs)
      if (!in.empty()) {
        live.insert(in);
        nodeUses[i].insert(in);
      }
    for (AttrDesc &a : n.attrs)
      if (a.graph) {
        std::set<std::string> inner;
        pruneGraph(*a.graph, inner);
        for (const std::string &s : inner) {
          live.insert(s);
          nodeUses[i].insert(s);
        }
      }
  }
  std::vector<NodeDesc> kept;
  std::set<std::string> seen;
  auto note = [&](const std::string &name) {
    auto it = g.values.find(name);
    if (it == g.values.end()) {
      usedOutside.insert(name);
      return;
    }
    if (!seen.insert(name).second)
      return;
    if (it->second.kind == ValueKind::Param ||
        it->second.kind == ValueKind::Buffer)
      g.weights.push_back(name);
    else if (it->second.kind == ValueKind::Constant)
      g.constants.push_back(name);
  };
  g.weights.clear();
  g.constants.clear();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!keep[i])
      continue;
    for (const std::string &in : g.nodes[i].inputs)
      if (!in.empty())
        note(in);
    for (const std::string &in : nodeUses[i])
      note(in);
    kept.push_back(std::move(g.nodes[i]));
  }
  for (const std::string &o : g.outputs)
    note(o);
  g.nodes = std::move(kept);
}

void Loader::run(::onnx::ModelProto &proto) {
  model.irVersion = proto.ir_version();
  model.producer = proto.producer_name();
  if (model.irVersion < kMinIr || model.irVersion > kMaxIr)
    throw LoadError("unsupported IR version " +
                    std::to_string(model.irVersion) +
                    " (supported: " + std::to_string(kMinIr) + " to " +
                    std::to_string(kMaxIr) + ")");
  for (const auto &o : proto.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx")
      model.opsetVersion = o.version();
  if (model.opsetVersion == 0 && model.irVersion <= 3)
    model.opsetVersion = kMinOpset; // IR 3 files may omit opset_import
  if (model.opsetVersion < kMinOpset || model.opsetVersion > kMaxOpset)
    throw LoadError("unsupported opset " + std::to_string(model.opsetVersion) +
                    " (supported: " + std::to_string(kMinOpset) + " to " +
                    std::to_string(kMaxOpset) + ")");
  if (!proto.has_graph() || proto.graph().node_size() == 0)
    throw LoadError("the model has no graph nodes");
  // The model's own functions (the dynamo exporter's modules) become ops of
  // the graphs that call them.
  detail::inlineLocalFunctions(proto);

  ::onnx::GraphProto &g = *proto.mutable_graph();
  std::set<std::string> inits;
  for (const auto &t : g.initializer())
    inits.insert(t.name());

  // A binding that names no dim of the inputs would otherwise leave the
  // model at the size it was exported with, without a word.
  // An anonymous dynamic dim (PaddlePaddle's dim_value -1 or dim_param
  // "?", or no value at all) is named INPUT:AXIS; the first axis of an
  // input also answers to "batch", as the exporters' batch dims do.
  auto anonymous = [](const ::onnx::TensorShapeProto::Dimension &d) {
    return d.has_dim_value() ? d.dim_value() < 0
                             : !d.has_dim_param() || d.dim_param().empty() ||
                                   d.dim_param() == "?";
  };
  std::set<std::string> symbols;
  for (const auto &input : g.input())
    if (!inits.count(input.name()) && input.type().has_tensor_type())
      for (int i = 0; i < input.type().tensor_type().shape().dim_size(); ++i) {
        const auto &dim = input.type().tensor_type().shape().dim(i);
        if (anonymous(dim)) {
          symbols.insert(input.name() + ":" + std::to_string(i));
          if (i == 0)
            symbols.insert("batch");
        } else if (dim.has_dim_param()) {
          symbols.insert(dim.dim_param());
        }
      }
  // Bind symbolic dims of the graph inputs; name every unbound one.
  std::vector<std::string> unbound;
  for (auto &input : *g.mutable_input()) {
    if (inits.count(input.name()) || !input.type().has_tensor_type())
      continue;
    auto *shape = input.mutable_type()->mutable_tensor_type()->mutable_shape();
    for (int i = 0; i < shape->dim_size(); ++i) {
      auto *dim = shape->mutable_dim(i);
      bool anon = anonymous(*dim);
      if (dim->has_dim_value() && !anon)
        continue;
      std::string sym = anon ? input.name() + ":" + std::to_string(i)
                             : dim->dim_param();
      auto it = options.dims.find(sym);
      if (anon && it == options.dims.end() && i == 0)
        it = options.dims.find("batch");
      if (it != options.dims.end()) {
        dim->set_dim_value(it->second);
        model.boundDims[it->first] = it->second;
      } else {
        unbound.push_back(sym + " in '" + input.name() + "' dim " +
                          std::to_string(i));
      }
    }
  }
  for (const auto &[name, value] : options.dims)
    if (!symbols.count(name) && !options.optionalDims.count(name)) {
      std::string known;
      for (const std::string &sym : symbols)
        known += (known.empty() ? "" : ", ") + sym;
      throw LoadError("--dim " + name + "=" + std::to_string(value) +
                      ": the model's inputs have no symbolic dim '" + name +
                      "' (" +
                      (known.empty() ? "they have none: its shapes are fixed"
                                     : "they have: " + known) +
                      ")");
    }
  if (!unbound.empty()) {
    std::string msg = "unbound symbolic dims: ";
    for (size_t i = 0; i < unbound.size(); ++i)
      msg += (i ? ", " : "") + unbound[i];
    throw LoadError(msg + "; bind each with --dim NAME=VALUE");
  }

  // Shapes the file states, for nodes our rules do not cover; ONNX's own
  // inference adds more when one such node needs it (shapeFromOnnx).
  this->proto = &proto;
  readValueInfo(g);

  GraphDesc &out = model.graph;
  out.name = g.name();
  collectBnStatistics(g);
  collectQuantizedWeights(g);
  addInitializers(g, out);
  // Graph inputs used only in parameter slots (BatchNorm scale and
  // statistics, Conv and Gemm weights, ...) are weights supplied as inputs,
  // as some exporters write them: they count as parameters (or buffers).
  for (const auto &n : g.node())
    for (int i = 0; i < n.input_size(); ++i) {
      const std::string &op = n.op_type();
      bool slot =
          (op == "BatchNormalization" && i >= 1) ||
          ((op == "Conv" || op == "ConvTranspose" || op == "Gemm" ||
            op == "LayerNormalization" || op == "InstanceNormalization") &&
           i >= 1) ||
          ((op == "LSTM" || op == "GRU" || op == "RNN") && i >= 1 && i <= 3) ||
          (op == "PRelu" && i == 1);
      auto [it, inserted] = onlyParameterSlots.try_emplace(n.input(i), slot);
      if (!inserted)
        it->second = it->second && slot;
      bool sliced = op == "Slice" && i == 0;
      auto [at, fresh] = onlySliced.try_emplace(n.input(i), sliced);
      if (!fresh)
        at->second = at->second && sliced;
    }
  for (const auto &input : g.input()) {
    if (inits.count(input.name()))
      continue;
    if (!input.type().has_tensor_type())
      throw LoadError("graph input '" + input.name() + "' is not a tensor");
    ValueDesc v;
    v.name = input.name();
    v.kind = ValueKind::Input;
    v.type = toElemType(input.type().tensor_type().elem_type());
    if (v.type == ElemType::Undefined)
      throw LoadError("graph input '" + input.name() + "' has no element type");
    int64_t elements = 1;
    for (const auto &d : input.type().tensor_type().shape().dim()) {
      int64_t dim = d.dim_value();
      if (dim < 0 || (dim > 0 && elements > detail::kMaxTensorElements / dim))
        throw LoadError("graph input '" + input.name() +
                        "' has a negative or huge dimension");
      elements *= dim;
      v.shape.push_back(dim);
    }
    auto slot = onlyParameterSlots.find(v.name);
    if (isFloat(v.type) && slot != onlyParameterSlots.end() && slot->second) {
      v.kind =
          bnStatistics.count(v.name) ? ValueKind::Buffer : ValueKind::Param;
      addValue(out, std::move(v));
      continue;
    }
    out.inputs.push_back(v.name);
    addValue(out, std::move(v));
  }
  Scope scope{&out, nullptr};
  processNodes(g, out, scope, "");
  for (const auto &o : g.output()) {
    if (!out.values.count(o.name()))
      throw LoadError("graph output '" + o.name() + "' is never defined");
    out.outputs.push_back(o.name());
  }
  std::set<std::string> outside;
  pruneGraph(out, outside);
}

} // namespace

LoadResult loadOnnxModelFromBytes(const std::string &bytes,
                                  const std::string &path,
                                  const LoadOptions &options) {
  LoadResult result;
  if (bytes.empty()) {
    result.error = path + ": empty file";
    return result;
  }
  try {
    ::onnx::ModelProto proto;
    bool text =
        path.size() > 9 && path.compare(path.size() - 9, 9, ".onnxtext") == 0;
    if (text) {
      // ONNX's textual syntax (onnx/defs/parser.h), for readable fixtures.
      // Its parser recurses per nested graph: deep nesting is refused first.
      if (textNesting(bytes) > kMaxGraphNesting + 1) {
        result.error = path + ": graphs nested deeper than " +
                       std::to_string(kMaxGraphNesting) + " levels";
        return result;
      }
      ::onnx::OnnxParser parser(bytes.c_str());
      auto status = parser.Parse(proto);
      if (!status.IsOK()) {
        std::string msg = status.ErrorMessage();
        for (char &c : msg)
          if (c == '\n')
            c = ' ';
        result.error = path + ": not valid ONNX text: " + msg;
        return result;
      }
    } else if (bytes.size() > size_t(INT32_MAX) ||
               !proto.ParseFromArray(bytes.data(), int(bytes.size()))) {
      result.error =
          path + ": not a valid ONNX protobuf (truncated or corrupt)";
      return result;
    }
    auto model = std::make_unique<ModelDesc>();
    model->path = path;
    Loader(options, *model).run(proto);
    result.model = std::move(model);
  } catch (const LoadError &e) {
    result.error = path + ": " + e.what();
  } catch (const std::exception &e) {
    result.error = path + ": " + e.what();
  } catch (...) {
    result.error = path + ": unknown error while loading";
  }
  result.error = printableLine(result.error);
  return result;
}

LoadResult loadOnnxModel(const std::string &path, const LoadOptions &options) {
  // Protobuf's own limit: a binary ONNX file is under 2 GiB.
  std::string bytes;
  std::string problem = readInputFile(path, INT32_MAX, bytes);
  if (!problem.empty()) {
    LoadResult r;
    r.error = printableLine(path + ": " + problem);
    return r;
  }
  return loadOnnxModelFromBytes(bytes, path, options);
}

} // namespace orrery::onnx
