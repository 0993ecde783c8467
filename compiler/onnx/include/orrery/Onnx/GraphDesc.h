//===- GraphDesc.h - a loaded ONNX graph as plain structs -----------------===//
//
// The only interface of the ONNX/protobuf island (compiled with exceptions):
// plain structs and an error string, no ONNX or LLVM types. Everything here
// is already shape-inferred, with symbolic dims bound and exporter shape
// subgraphs folded to constants.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_ONNX_GRAPHDESC_H
#define ORRERY_ONNX_GRAPHDESC_H

#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

namespace orrery::onnx {

/// Element types, numbered as ONNX's TensorProto.DataType (so that a Cast's
/// `to` and a tensor's data_type map one to one).
enum class ElemType : int32_t {
  Undefined = 0,
  Float = 1,
  UInt8 = 2,
  Int8 = 3,
  UInt16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  String = 8,
  Bool = 9,
  Float16 = 10,
  Double = 11,
  UInt32 = 12,
  UInt64 = 13,
  Complex64 = 14,
  Complex128 = 15,
  BFloat16 = 16,
  Float8E4M3FN = 17,
  Float8E4M3FNUZ = 18,
  Float8E5M2 = 19,
  Float8E5M2FNUZ = 20,
  UInt4 = 21,
  Int4 = 22,
  Float4E2M1 = 23,
};

/// What a value is, for the planner.
enum class ValueKind {
  Input,    ///< a graph input fed with data (tokens, pixels, a state)
  Param,    ///< a trainable weight
  Buffer,   ///< a weight that is not trained (BatchNorm running statistics)
  Constant, ///< a small constant whose values are known
  Computed  ///< the output of a node
};

/// A tensor value: static shape, element type, and values when constant.
struct ValueDesc {
  std::string name;
  ElemType type = ElemType::Undefined;
  std::vector<int64_t> shape;
  ValueKind kind = ValueKind::Computed;
  /// The values of a Constant, in row-major order; empty otherwise.
  std::vector<double> values;
  /// For a matrix parameter that may be a head tied to an embedding table
  /// (Importer's tieEmbeddingAndHead), with its data in the file: a digest
  /// of its elements independent of their order, so equal for a table and
  /// its transpose; 0 when the file holds no data for it.
  uint64_t elementsDigest = 0;
  /// A OneHot's output, or a view, cast or gather of one (a router's
  /// expert mask): the expected fraction of its elements that are set,
  /// 1/depth; 0 for anything else. Sizes NonZero of such a mask as
  /// balanced routing would (Loader::routedCount).
  double oneHotDensity = 0;
  int64_t numElements() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
};

struct GraphDesc;

/// One ONNX attribute; only the fields of its kind are set.
struct AttrDesc {
  enum class Kind { Int, Float, String, Ints, Floats, Strings, Tensor, Graph };
  std::string name;
  Kind kind = Kind::Int;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  /// For Kind::Tensor: its type, shape and (when small) values.
  ValueDesc tensor;
  /// For Kind::Graph: the processed subgraph (If branches, Loop/Scan bodies).
  std::shared_ptr<GraphDesc> graph;
};

/// One node that survives folding, in topological order.
struct NodeDesc {
  std::string name;
  std::string opType;
  std::string domain;
  /// Value names; "" marks an absent optional input.
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<AttrDesc> attrs;
};

/// A graph or subgraph. Subgraphs may use values of enclosing graphs.
struct GraphDesc {
  std::string name;
  /// Values fed from outside: model inputs, or a body's block arguments.
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<NodeDesc> nodes;
  /// Every value this graph defines (inputs, weights, constants, node outputs).
  std::map<std::string, ValueDesc> values;
  /// Weights (Param and Buffer) in first-seen order, for a stable import.
  std::vector<std::string> weights;
  /// Constants that nodes of this graph use, in first-seen order.
  std::vector<std::string> constants;
};

/// A loaded model.
struct ModelDesc {
  std::string path;
  int64_t irVersion = 0;
  int64_t opsetVersion = 0; ///< of the default ONNX domain
  std::string producer;
  GraphDesc graph;
  /// Symbolic dims and the values they were bound to.
  std::map<std::string, int64_t> boundDims;
};

struct LoadOptions {
  /// Values for symbolic dims (`--dim batch=8`). One the inputs do not
  /// have is an error (it would leave the model at its exported size),
  /// unless it is optional (a default the tool supplies: batch=1).
  std::map<std::string, int64_t> dims;
  std::set<std::string> optionalDims;
};

/// The model, or a one-line error naming the offending thing.
struct LoadResult {
  std::unique_ptr<ModelDesc> model;
  std::string error;
};

/// Loads a binary .onnx file. Never opens external-data files; never throws.
LoadResult loadOnnxModel(const std::string &path, const LoadOptions &options);
/// Loads from bytes in memory; `path` is used in messages only.
LoadResult loadOnnxModelFromBytes(const std::string &bytes,
                                  const std::string &path,
                                  const LoadOptions &options);

/// "float32", "int64", ... as in numpy.
const char *elemTypeName(ElemType type);
/// Bits per element (Bool: 8; 4-bit types: 4).
int64_t elemTypeBits(ElemType type);
/// The element type of an ONNX data_type number; Undefined for numbers this
/// loader does not know (ONNX's later types).
ElemType elemTypeFromOnnx(int32_t dataType);
/// Floating-point types: the ones a weight is trained in or stored as.
bool isFloatElemType(ElemType type);
/// An integer constant's value (held as a double) as int64, saturating:
/// INT64_MAX/MIN (Slice's open ends) round past the range as doubles, and
/// converting those is undefined; NaN is 0.
int64_t saturatingInt64(double value);

} // namespace orrery::onnx

#endif // ORRERY_ONNX_GRAPHDESC_H
