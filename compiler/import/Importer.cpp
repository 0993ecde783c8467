//===- Importer.cpp - GraphDesc → orrery dialect
//---------------------------===//
//
// A straight walk over the loaded graph: weights and constants first, then
// one op per node in order. ONNX op types map to dialect mnemonics by name
// (`LayerNormalization` → `orrery.layer_normalization`); an op type without a
// registered op becomes `orrery.onnx_op`, keeping its type and domain.
//
//===----------------------------------------------------------------------===//

#include "orrery/Import/Importer.h"
#include "orrery/Dialect/OrreryDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"

#include <cmath>
#include <optional>

using namespace mlir;

namespace orrery {
namespace {

/// A weight's elements digest (onnx::ValueDesc::elementsDigest), set while
/// importing and dropped once the heads are tied.
constexpr llvm::StringLiteral kElementsDigest("orrery.elements_digest");

/// "LayerNormalization" → "layer_normalization", "LRN" → "lrn",
/// "GRU" → "gru", "MatMul" → "matmul", "PRelu" → "prelu".
std::string mnemonicFor(llvm::StringRef opType) {
  static const llvm::StringMap<std::string> special = {
      {"MatMul", "matmul"},  {"PRelu", "prelu"},    {"LRN", "lrn"},
      {"GRU", "gru"},        {"RNN", "rnn"},        {"LSTM", "lstm"},
      {"ArgMax", "arg_max"}, {"ArgMin", "arg_min"}, {"ReduceL2", "reduce_l2"}};
  auto it = special.find(opType);
  if (it != special.end())
    return it->second;
  std::string out;
  for (size_t i = 0; i < opType.size(); ++i) {
    char c = opType[i];
    if (llvm::isUpper(c) && i > 0 && !llvm::isUpper(opType[i - 1]))
      out += '_';
    out += llvm::toLower(c);
  }
  return out;
}

class Importer {
public:
  Importer(MLIRContext &ctx, const onnx::ModelDesc &model)
      : ctx(ctx), model(model), builder(&ctx) {}

  FailureOr<OwningOpRef<ModuleOp>> run();
  std::string error;

private:
  MLIRContext &ctx;
  const onnx::ModelDesc &model;
  OpBuilder builder;
  /// Values by ONNX name, one map per nested graph (innermost last).
  std::vector<llvm::StringMap<Value>> scopes;

  Value lookup(llvm::StringRef name) {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end())
        return found->second;
    }
    return {};
  }
  FailureOr<Type> elementType(onnx::ElemType t, llvm::StringRef what);
  FailureOr<RankedTensorType> tensorType(const onnx::ValueDesc &v);
  FailureOr<Attribute> denseValues(const onnx::ValueDesc &v);
  LogicalResult importGraph(const onnx::GraphDesc &g);
  LogicalResult importNode(const onnx::GraphDesc &g, const onnx::NodeDesc &n);
  /// ONNX's own fused ops (opset 23 Attention, RMSNormalization,
  /// RotaryEmbedding) as the dialect's fused ops; nullopt for other ops.
  std::optional<LogicalResult> importFusedNode(const onnx::GraphDesc &g,
                                               const onnx::NodeDesc &n,
                                               ArrayRef<Value> operands,
                                               ArrayRef<Type> resultTypes,
                                               Location loc);
  Location locFor(llvm::StringRef name) {
    return NameLoc::get(StringAttr::get(&ctx, name),
                        FileLineColLoc::get(&ctx, model.path, 0, 0));
  }
  LogicalResult fail(const std::string &msg) {
    error = msg;
    return failure();
  }
};

FailureOr<Type> Importer::elementType(onnx::ElemType t, llvm::StringRef what) {
  using E = onnx::ElemType;
  switch (t) {
  case E::Float:
    return Type(builder.getF32Type());
  case E::Float16:
    return Type(builder.getF16Type());
  case E::BFloat16:
    return Type(builder.getBF16Type());
  case E::Double:
    return Type(builder.getF64Type());
  case E::Int64:
    return Type(builder.getI64Type());
  case E::Int32:
    return Type(builder.getI32Type());
  case E::Int16:
    return Type(builder.getIntegerType(16));
  case E::Int8:
    return Type(builder.getIntegerType(8));
  case E::Bool:
    return Type(builder.getI1Type());
  case E::UInt8:
    return Type(builder.getIntegerType(8, false));
  case E::UInt16:
    return Type(builder.getIntegerType(16, false));
  case E::UInt32:
    return Type(builder.getIntegerType(32, false));
  case E::UInt64:
    return Type(builder.getIntegerType(64, false));
  case E::Int4:
    return Type(builder.getIntegerType(4));
  case E::UInt4:
    return Type(builder.getIntegerType(4, false));
  case E::Float8E4M3FN:
    return Type(builder.getType<Float8E4M3FNType>());
  case E::Float8E4M3FNUZ:
    return Type(builder.getType<Float8E4M3FNUZType>());
  case E::Float8E5M2:
    return Type(builder.getType<Float8E5M2Type>());
  case E::Float8E5M2FNUZ:
    return Type(builder.getType<Float8E5M2FNUZType>());
  case E::Float4E2M1:
    return Type(builder.getType<Float4E2M1FNType>());
  default:
    (void)fail(model.path + ": value '" + what.str() + "' has element type " +
               onnx::elemTypeName(t) +
               ", which the orrery dialect cannot hold");
    return failure();
  }
}

FailureOr<RankedTensorType> Importer::tensorType(const onnx::ValueDesc &v) {
  FailureOr<Type> elem = elementType(v.type, v.name);
  if (failed(elem))
    return failure();
  return RankedTensorType::get(v.shape, *elem);
}

FailureOr<Attribute> Importer::denseValues(const onnx::ValueDesc &v) {
  FailureOr<RankedTensorType> type = tensorType(v);
  if (failed(type))
    return failure();
  Type elem = type->getElementType();
  SmallVector<Attribute> attrs;
  attrs.reserve(v.values.size());
  for (double x : v.values) {
    if (auto f = dyn_cast<FloatType>(elem))
      attrs.push_back(FloatAttr::get(f, x));
    else
      attrs.push_back(IntegerAttr::get(
          elem, APInt(elem.getIntOrFloatBitWidth(),
                      uint64_t(onnx::saturatingInt64(x)),
                      /*isSigned=*/true, /*implicitTrunc=*/true)));
  }
  return Attribute(DenseElementsAttr::get(*type, attrs));
}

LogicalResult Importer::importGraph(const onnx::GraphDesc &g) {
  for (const std::string &name : g.weights) {
    const onnx::ValueDesc &v = g.values.at(name);
    FailureOr<RankedTensorType> type = tensorType(v);
    if (failed(type))
      return failure();
    auto w = WeightOp::create(builder, locFor(name), *type, name,
                              v.kind == onnx::ValueKind::Param);
    if (v.elementsDigest) // read by tieEmbeddingAndHead, then dropped
      w->setAttr(kElementsDigest,
                 builder.getI64IntegerAttr(int64_t(v.elementsDigest)));
    scopes.back()[name] = w;
  }
  for (const std::string &name : g.constants) {
    FailureOr<Attribute> attr = denseValues(g.values.at(name));
    if (failed(attr))
      return failure();
    auto c = ConstantOp::create(builder, locFor(name),
                                cast<TypedAttr>(*attr).getType(),
                                cast<ElementsAttr>(*attr));
    scopes.back()[name] = c;
  }
  for (const onnx::NodeDesc &n : g.nodes)
    if (failed(importNode(g, n)))
      return failure();
  return success();
}

/// A module path as torch names parameters ("encoder.layer.3.fc1.weight"),
/// not a name an exporter made up for a value ("onnx::MatMul_12",
/// "/fc1/MatMul_output_0", "9").
static bool namesAParameter(llvm::StringRef name) {
  if (name.starts_with("onnx::") || name.starts_with("/") ||
      !name.contains('.'))
    return false;
  return llvm::all_of(name, [](char c) {
    return llvm::isAlnum(c) || c == '.' || c == '_' || c == '-';
  });
}

LogicalResult Importer::importNode(const onnx::GraphDesc &g,
                                   const onnx::NodeDesc &n) {
  Location loc = locFor(n.name);
  SmallVector<Value> operands;
  for (const std::string &in : n.inputs) {
    if (in.empty()) {
      operands.push_back(NoneOp::create(builder, loc, builder.getNoneType()));
      continue;
    }
    Value v = lookup(in);
    if (!v)
      return fail(model.path + ": node '" + n.name + "' (" + n.opType +
                  "): value '" + in + "' was not imported");
    operands.push_back(v);
  }
  SmallVector<Type> resultTypes;
  for (const std::string &out : n.outputs) {
    if (out.empty()) {
      resultTypes.push_back(builder.getNoneType());
      continue;
    }
    FailureOr<RankedTensorType> t = tensorType(g.values.at(out));
    if (failed(t))
      return failure();
    resultTypes.push_back(*t);
  }

  // An Identity of a weight is that weight (TorchScript writes a shared
  // weight through one Identity per user, named onnx::Op_N: ALBERT's twelve
  // layers read one set) -- unless the Identity bears a parameter's own
  // name: torch's exporter merges parameters of equal values in an
  // eval-mode export (its initializer deduplication) and writes each
  // merged one as `b.weight = Identity(a.weight)`. That is a parameter of
  // its own, counted and priced as one.
  if (n.opType == "Identity" && n.domain.empty() && operands.size() == 1 &&
      n.outputs.size() == 1 && !n.outputs[0].empty() &&
      operands[0].getDefiningOp<WeightOp>() &&
      operands[0].getType() == resultTypes[0]) {
    const std::string &out = n.outputs[0];
    WeightOp w = operands[0].getDefiningOp<WeightOp>();
    if (!namesAParameter(out) || out == w.getName()) {
      scopes.back()[out] = operands[0];
      return success();
    }
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointAfter(w);
    scopes.back()[out] = WeightOp::create(builder, locFor(out), w.getType(),
                                          out, w.getTrainable());
    return success();
  }
  if (std::optional<LogicalResult> fused =
          importFusedNode(g, n, operands, resultTypes, loc))
    return *fused;
  std::string name = "orrery." + mnemonicFor(n.opType);
  bool known = n.domain.empty() &&
               RegisteredOperationName::lookup(name, &ctx).has_value() &&
               name != "orrery.onnx_op" && name != "orrery.weight" &&
               name != "orrery.constant" && name != "orrery.none" &&
               name != "orrery.yield";
  // Absent optional outputs only exist for onnx_op (any type); drop trailing
  // ones for dialect ops.
  if (known)
    while (!resultTypes.empty() && isa<NoneType>(resultTypes.back()))
      resultTypes.pop_back();
  for (Type t : resultTypes)
    if (known && isa<NoneType>(t))
      known = false;
  OperationState state(loc, known ? name : "orrery.onnx_op");
  state.addOperands(operands);
  state.addTypes(resultTypes);
  if (!known) {
    state.addAttribute("op_type", builder.getStringAttr(n.opType));
    state.addAttribute("domain", builder.getStringAttr(n.domain));
  }
  std::vector<const onnx::AttrDesc *> graphs;
  for (const onnx::AttrDesc &a : n.attrs) {
    using K = onnx::AttrDesc::Kind;
    Attribute attr;
    switch (a.kind) {
    case K::Int:
      attr = builder.getI64IntegerAttr(a.i);
      break;
    case K::Float:
      attr = builder.getF32FloatAttr(float(a.f));
      break;
    case K::String:
      attr = builder.getStringAttr(a.s);
      break;
    case K::Ints:
      attr = builder.getDenseI64ArrayAttr(a.ints);
      break;
    case K::Floats: {
      SmallVector<float> fs(a.floats.begin(), a.floats.end());
      attr = builder.getDenseF32ArrayAttr(fs);
      break;
    }
    case K::Strings: {
      SmallVector<StringRef> ss(a.strings.begin(), a.strings.end());
      attr = builder.getStrArrayAttr(ss);
      break;
    }
    case K::Tensor:
      if ((int64_t)a.tensor.values.size() == a.tensor.numElements()) {
        FailureOr<Attribute> d = denseValues(a.tensor);
        if (failed(d))
          return failure();
        attr = *d;
      }
      break;
    case K::Graph:
      graphs.push_back(&a);
      break;
    }
    if (attr) {
      // Attribute names that clash with onnx_op's own are renamed.
      std::string key = (!known && (a.name == "op_type" || a.name == "domain"))
                            ? "onnx." + a.name
                            : a.name;
      state.addAttribute(key, attr);
    }
  }
  bool controlFlow =
      known && (n.opType == "If" || n.opType == "Loop" || n.opType == "Scan");
  if (!controlFlow && !graphs.empty())
    return fail(
        model.path + ": node '" + n.name + "' (" + n.opType +
        "): subgraph attributes are only supported on If, Loop and Scan");
  if (controlFlow) {
    // If: then, else. Loop/Scan: body.
    std::vector<const onnx::GraphDesc *> bodies;
    if (n.opType == "If") {
      const onnx::GraphDesc *thenG = nullptr, *elseG = nullptr;
      for (const onnx::AttrDesc *a : graphs)
        (a->name == "then_branch" ? thenG : elseG) = a->graph.get();
      bodies = {thenG, elseG};
    } else {
      for (const onnx::AttrDesc *a : graphs)
        bodies.push_back(a->graph.get());
    }
    for (size_t i = 0; i < bodies.size(); ++i)
      state.addRegion();
    Operation *op = builder.create(state);
    OpBuilder::InsertionGuard guard(builder);
    for (size_t i = 0; i < bodies.size(); ++i) {
      const onnx::GraphDesc *body = bodies[i];
      if (!body)
        return fail(model.path + ": node '" + n.name + "': missing body");
      Block *block = new Block();
      op->getRegion(i).push_back(block);
      scopes.emplace_back();
      for (const std::string &in : body->inputs) {
        FailureOr<RankedTensorType> t = tensorType(body->values.at(in));
        if (failed(t))
          return failure();
        scopes.back()[in] = block->addArgument(*t, loc);
      }
      builder.setInsertionPointToStart(block);
      if (failed(importGraph(*body)))
        return failure();
      SmallVector<Value> results;
      for (const std::string &out : body->outputs)
        results.push_back(lookup(out));
      YieldOp::create(builder, loc, results);
      scopes.pop_back();
    }
    for (size_t i = 0; i < n.outputs.size(); ++i)
      scopes.back()[n.outputs[i]] = op->getResult(i);
    return success();
  }
  Operation *op = builder.create(state);
  for (size_t i = 0; i < n.outputs.size() && i < op->getNumResults(); ++i)
    if (!n.outputs[i].empty())
      scopes.back()[n.outputs[i]] = op->getResult(i);
  return success();
}

std::optional<LogicalResult>
Importer::importFusedNode(const onnx::GraphDesc &g, const onnx::NodeDesc &n,
                          ArrayRef<Value> operands, ArrayRef<Type> resultTypes,
                          Location loc) {
  if (!n.domain.empty())
    return std::nullopt;
  auto intAttr = [&](const char *name, int64_t dflt) {
    for (const onnx::AttrDesc &a : n.attrs)
      if (a.name == name && a.kind == onnx::AttrDesc::Kind::Int)
        return a.i;
    return dflt;
  };
  auto floatAttr = [&](const char *name, double dflt) {
    for (const onnx::AttrDesc &a : n.attrs)
      if (a.name == name && a.kind == onnx::AttrDesc::Kind::Float)
        return a.f;
    return dflt;
  };
  auto present = [&](size_t i) {
    return i < n.outputs.size() && !n.outputs[i].empty();
  };
  auto refuse = [&](const std::string &why) -> std::optional<LogicalResult> {
    return fail(model.path + ": node '" + n.name + "' (" + n.opType + "): " +
                why);
  };
  auto bind = [&](Operation *op) -> std::optional<LogicalResult> {
    std::string why;
    {
      ScopedDiagnosticHandler quiet(&ctx, [&](Diagnostic &d) {
        if (why.empty())
          why = d.str();
        return success();
      });
      if (failed(mlir::verify(op, /*verifyRecursively=*/false))) {
        op->erase();
        return refuse("not one fused kernel: " + why);
      }
    }
    scopes.back()[n.outputs[0]] = op->getResult(0);
    return success();
  };
  if (n.opType == "Attention" && model.opsetVersion >= 23) {
    if (operands.size() > 4)
      return refuse("past key/value inputs (a decoding export with a KV "
                    "cache) are not priced; export without the cache");
    if (present(1) || present(2) || present(3))
      return refuse("its present key/value or score outputs are used; only "
                    "the attention output is priced");
    const onnx::ValueDesc &q = g.values.at(n.inputs[0]),
                          &k = g.values.at(n.inputs[1]),
                          &v = g.values.at(n.inputs[2]);
    int64_t batch = q.shape[0], heads, kvHeads, sq, skv, d, dv;
    if (q.shape.size() == 4) {
      heads = q.shape[1], sq = q.shape[2], d = q.shape[3];
      kvHeads = k.shape[1], skv = k.shape[2], dv = v.shape[3];
    } else {
      heads = intAttr("q_num_heads", 0), kvHeads = intAttr("kv_num_heads", 0);
      sq = q.shape[1], skv = k.shape[1], d = q.shape[2] / heads;
      dv = v.shape[2] / kvHeads;
    }
    double scale = floatAttr("scale", 0);
    if (scale == 0)
      scale = 1.0 / std::sqrt(double(d));
    SmallVector<Value> ops{operands[0], operands[1], operands[2]};
    if (operands.size() > 3 && !isa<NoneType>(operands[3].getType()))
      ops.push_back(operands[3]);
    SmallVector<NamedAttribute> attrs = fusedAttentionAttributes(
        builder, {batch, heads, kvHeads, sq, skv, d, dv, scale, 0.0,
                  intAttr("is_causal", 0) != 0});
    return bind(FusedAttentionOp::create(
        builder, loc, TypeRange{resultTypes[0]}, ops, attrs));
  }
  if (n.opType == "RMSNormalization" && operands.size() == 2) {
    int64_t rank = cast<RankedTensorType>(resultTypes[0]).getRank();
    int64_t axis = intAttr("axis", -1);
    if (axis != -1 && axis != rank - 1)
      return std::nullopt; // over several axes: an op without a formula
    return bind(RmsNormalizationOp::create(
        builder, loc, TypeRange{resultTypes[0]}, ValueRange{operands[0], operands[1]},
        ArrayRef<NamedAttribute>{builder.getNamedAttr(
            "epsilon", builder.getF64FloatAttr(floatAttr("epsilon", 1e-5)))}));
  }
  if (n.opType == "RotaryEmbedding" && operands.size() >= 3)
    // position_ids (input 3) index the tables inside the kernel.
    return bind(RotaryEmbeddingOp::create(
        builder, loc, TypeRange{resultTypes[0]},
        ValueRange{operands[0], operands[1], operands[2]},
        ArrayRef<NamedAttribute>{}));
  return std::nullopt;
}

/// Ties an output projection that an exporter wrote as its own initializer
/// back to the embedding table it shares in the training framework.
/// TorchScript folds the head's Transpose(table) into a new anonymous
/// initializer, so GPT-2, OPT, Qwen2, T5 and Whisper reach ONNX with the
/// table twice; the training job holds it once (Megatron's
/// --untie-embeddings-and-output-weights off, HF's tie_word_embeddings).
/// The rule, by structure because the values are not in the file: a
/// trainable weight that TorchScript folded (named `onnx::...`) or that
/// onnxruntime's optimizer folded from the head's Transpose (named after
/// that node's output, `/lm_head/Transpose_output_0`), used only
/// by a MatMul (or Gemm) as its [hidden, vocab] operand, with the shape,
/// transposed, and the element type of a table an embedding Gather reads,
/// is that table. A head of another element type (Pythia's fp32 embed_out
/// beside an fp16 embed_in) stays its own weight, and so does every head
/// the dynamo exporter wrote apart: it keeps a shared table shared (one
/// initializer, a Transpose node), so a head it stored on its own
/// (Mixtral's `val_980`) is untied. An untied TorchScript head of the
/// table's shape and type is told apart only where the file holds both
/// weights' data: a head whose elements differ from the table's (their
/// digests, orrery.elements_digest, independent of the order) is its own
/// weight (docs/importer.md). The head then reads the table through a Transpose (a view) and the
/// module records each tie in `orrery.tied_weights` for `orrery stats`.
void tieEmbeddingAndHead(ModuleOp module, func::FuncOp main) {
  SmallVector<WeightOp> tables;
  main.walk([&](GatherOp g) {
    auto w = g->getOperand(0).getDefiningOp<WeightOp>();
    auto t = w ? dyn_cast<RankedTensorType>(w.getType()) : nullptr;
    int64_t axis = 0;
    if (auto a = g->getAttrOfType<IntegerAttr>("axis"))
      axis = a.getInt();
    if (t && w.getTrainable() && t.getRank() == 2 && axis == 0 &&
        t.getDimSize(0) != t.getDimSize(1) && !llvm::is_contained(tables, w))
      tables.push_back(w);
  });
  if (tables.empty())
    return;
  OpBuilder b(module.getContext());
  SmallVector<Attribute> notes;
  SmallVector<WeightOp> dead;
  main.walk([&](Operation *op) {
    if (!isa<MatMulOp, GemmOp>(op) || op->getNumOperands() < 2)
      return;
    auto head = op->getOperand(1).getDefiningOp<WeightOp>();
    if (!head || !head.getTrainable() || !head->hasOneUse() ||
        !(head.getName().starts_with("onnx::") ||
          head.getName().starts_with("/")) ||
        llvm::is_contained(tables, head))
      return;
    auto ht = cast<RankedTensorType>(head.getType());
    if (ht.getRank() != 2)
      return;
    bool transB = false;
    if (auto a = op->getAttrOfType<IntegerAttr>("transB"))
      transB = isa<GemmOp>(op) && a.getInt() != 0;
    // The weight as [vocab, hidden], the table's layout.
    int64_t vocab = transB ? ht.getDimSize(0) : ht.getDimSize(1);
    int64_t hidden = transB ? ht.getDimSize(1) : ht.getDimSize(0);
    auto digest = [](WeightOp w) {
      auto a = w->getAttrOfType<IntegerAttr>(kElementsDigest);
      return a ? a.getInt() : 0;
    };
    for (WeightOp table : tables) {
      auto tt = cast<RankedTensorType>(table.getType());
      if (tt.getDimSize(0) != vocab || tt.getDimSize(1) != hidden ||
          tt.getElementType() != ht.getElementType())
        continue;
      if (digest(head) && digest(table) && digest(head) != digest(table))
        continue; // both in the file, other values: an untied head
      Value replacement = table;
      if (!transB) {
        b.setInsertionPoint(op);
        replacement =
            TransposeOp::create(
                 b, head.getLoc(), TypeRange{ht}, ValueRange{table},
                 ArrayRef<NamedAttribute>{b.getNamedAttr(
                     "perm", b.getDenseI64ArrayAttr({1, 0}))})
                ->getResult(0);
      }
      op->setOperand(1, replacement);
      notes.push_back(b.getStringAttr(head.getName() + " = " +
                                      table.getName() +
                                      (transB ? "" : " transposed")));
      dead.push_back(head);
      break;
    }
  });
  for (WeightOp w : dead)
    w->erase();
  if (!notes.empty())
    module->setAttr("orrery.tied_weights", b.getArrayAttr(notes));
}

FailureOr<OwningOpRef<ModuleOp>> Importer::run() {
  OwningOpRef<ModuleOp> module = ModuleOp::create(locFor(model.path));
  module->getOperation()->setAttr("orrery.source",
                                  builder.getStringAttr(model.path));
  module->getOperation()->setAttr(
      "orrery.opset", builder.getI64IntegerAttr(model.opsetVersion));
  module->getOperation()->setAttr("orrery.ir_version",
                                  builder.getI64IntegerAttr(model.irVersion));
  if (!model.producer.empty())
    module->getOperation()->setAttr("orrery.producer",
                                    builder.getStringAttr(model.producer));
  SmallVector<NamedAttribute> dims;
  for (const auto &[sym, value] : model.boundDims)
    dims.push_back(builder.getNamedAttr(sym, builder.getI64IntegerAttr(value)));
  if (!dims.empty())
    module->getOperation()->setAttr("orrery.dims",
                                    builder.getDictionaryAttr(dims));

  const onnx::GraphDesc &g = model.graph;
  SmallVector<Type> inputs, outputs;
  for (const std::string &in : g.inputs) {
    FailureOr<RankedTensorType> t = tensorType(g.values.at(in));
    if (failed(t))
      return failure();
    inputs.push_back(*t);
  }
  for (const std::string &out : g.outputs) {
    FailureOr<RankedTensorType> t = tensorType(g.values.at(out));
    if (failed(t))
      return failure();
    outputs.push_back(*t);
  }
  builder.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(builder, locFor("main"), "main",
                                   builder.getFunctionType(inputs, outputs));
  Block *entry = func.addEntryBlock();
  scopes.emplace_back();
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    scopes.back()[g.inputs[i]] = entry->getArgument(i);
    func.setArgAttr(i, "orrery.name", builder.getStringAttr(g.inputs[i]));
  }
  for (size_t i = 0; i < g.outputs.size(); ++i)
    func.setResultAttr(i, "orrery.name", builder.getStringAttr(g.outputs[i]));
  builder.setInsertionPointToStart(entry);
  if (failed(importGraph(g)))
    return failure();
  SmallVector<Value> results;
  for (const std::string &out : g.outputs) {
    Value v = lookup(out);
    if (!v) {
      // A graph output that folded to a constant or is a weight.
      auto it = g.values.find(out);
      if (it == g.values.end() || it->second.kind != onnx::ValueKind::Constant)
        return fail(model.path + ": graph output '" + out +
                    "' was not imported");
      FailureOr<Attribute> attr = denseValues(it->second);
      if (failed(attr))
        return failure();
      v = ConstantOp::create(builder, locFor(out),
                             cast<TypedAttr>(*attr).getType(),
                             cast<ElementsAttr>(*attr));
    }
    results.push_back(v);
  }
  func::ReturnOp::create(builder, locFor("main"), results);
  tieEmbeddingAndHead(*module, func);
  func.walk([](WeightOp w) { w->removeAttr(kElementsDigest); });

  // The verifier's diagnostics become the one-line error.
  std::string diag;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
    if (diag.empty())
      diag = d.str();
    return success();
  });
  if (failed(verify(*module)))
    return fail(model.path + ": imported module does not verify: " + diag);
  return std::move(module);
}

} // namespace

void registerOrreryDialects(MLIRContext &context) {
  context.loadDialect<OrreryDialect, func::FuncDialect, shard::ShardDialect>();
}

llvm::Expected<OwningOpRef<ModuleOp>>
importModel(MLIRContext &context, const onnx::ModelDesc &model) {
  registerOrreryDialects(context);
  Importer importer(context, model);
  FailureOr<OwningOpRef<ModuleOp>> module = importer.run();
  if (failed(module))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   importer.error);
  return std::move(*module);
}

llvm::Expected<OwningOpRef<ModuleOp>>
importOnnxFile(MLIRContext &context, const std::string &path,
               const onnx::LoadOptions &options) {
  onnx::LoadResult loaded = onnx::loadOnnxModel(path, options);
  if (!loaded.model)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   loaded.error);
  return importModel(context, *loaded.model);
}

} // namespace orrery
