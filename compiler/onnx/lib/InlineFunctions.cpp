//===- InlineFunctions.cpp - model-local ONNX functions inlined -----------===//
//
// ONNX 1.12 reads FunctionProto as IR 8 defines it. Fields newer IR versions
// added (11: attribute_proto, the attributes' defaults; 13: overload) are
// kept by protobuf as unknown fields; the defaults are read back from the
// wire format here. Overloads (two functions of one name and domain) are
// refused by name: which one a call means is in a field 1.12 cannot read.
//
//===----------------------------------------------------------------------===//

#include "InlineFunctions.h"
#include "Inference.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <map>
#include <string>

namespace orrery::onnx::detail {
namespace {

constexpr int kMaxCallDepth = 64;
/// Nodes after inlining, at most: a function calling another twice per
/// level doubles the graph each level.
constexpr int64_t kMaxInlinedNodes = int64_t(1) << 20;

struct Function {
  const ::onnx::FunctionProto *proto = nullptr;
  /// attribute_proto (IR 9+): the defaults of the attributes.
  std::map<std::string, ::onnx::AttributeProto> defaults;
};

/// Fields 11 (attribute_proto) of a FunctionProto, from its wire format.
std::map<std::string, ::onnx::AttributeProto>
attributeDefaults(const ::onnx::FunctionProto &f) {
  using google::protobuf::internal::WireFormatLite;
  std::map<std::string, ::onnx::AttributeProto> out;
  std::string bytes = f.SerializeAsString();
  google::protobuf::io::CodedInputStream in(
      reinterpret_cast<const uint8_t *>(bytes.data()), int(bytes.size()));
  while (uint32_t tag = in.ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) == 11 &&
        WireFormatLite::GetTagWireType(tag) ==
            WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      std::string payload;
      uint32_t length = 0;
      if (!in.ReadVarint32(&length) || !in.ReadString(&payload, int(length)))
        break;
      ::onnx::AttributeProto a;
      if (a.ParseFromString(payload) && !a.name().empty())
        out[a.name()] = a;
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      break;
    }
  }
  return out;
}

class Inliner {
public:
  explicit Inliner(const ::onnx::ModelProto &model) {
    for (const auto &f : model.functions()) {
      std::string key = f.domain() + "::" + f.name();
      if (functions.count(key))
        throw LoadError("function '" + f.name() + "' of domain '" +
                        f.domain() +
                        "' is defined twice (overloads are an ONNX IR 10 "
                        "field this build's ONNX 1.12 cannot read)");
      functions[key] = {&f, attributeDefaults(f)};
    }
  }

  bool empty() const { return functions.empty(); }

  void inlineGraph(::onnx::GraphProto &g, int depth) {
    ::google::protobuf::RepeatedPtrField<::onnx::NodeProto> nodes;
    nodes.Swap(g.mutable_node());
    for (auto &n : nodes)
      emit(n, *g.mutable_node(), depth);
  }

private:
  std::map<std::string, Function> functions;
  int64_t calls = 0, inlinedNodes = 0;

  const Function *calleeOf(const ::onnx::NodeProto &n) const {
    auto it = functions.find(n.domain() + "::" + n.op_type());
    return it == functions.end() ? nullptr : &it->second;
  }

  /// Appends `n` to `out`: its body if it calls a function, else itself
  /// with its subgraphs' calls inlined.
  void emit(::onnx::NodeProto &n,
            ::google::protobuf::RepeatedPtrField<::onnx::NodeProto> &out,
            int depth) {
    const Function *f = calleeOf(n);
    if (!f) {
      for (auto &a : *n.mutable_attribute()) {
        if (a.has_g())
          inlineGraph(*a.mutable_g(), depth);
        for (auto &g : *a.mutable_graphs())
          inlineGraph(g, depth);
      }
      *out.Add() = std::move(n);
      return;
    }
    if (depth >= kMaxCallDepth)
      throw LoadError("function '" + n.op_type() + "' of domain '" +
                      n.domain() + "': calls nested deeper than " +
                      std::to_string(kMaxCallDepth) +
                      " (a function that calls itself?)");
    std::string prefix = (n.name().empty() ? n.op_type() : n.name()) + "/" +
                         std::to_string(calls++) + "/";
    std::map<std::string, std::string> names;
    const ::onnx::FunctionProto &fp = *f->proto;
    for (int i = 0; i < fp.input_size(); ++i)
      names[fp.input(i)] = i < n.input_size() ? n.input(i) : "";
    for (int i = 0; i < fp.output_size(); ++i)
      names[fp.output(i)] =
          i < n.output_size() && !n.output(i).empty() ? n.output(i)
                                                      : prefix + fp.output(i);
    auto rename = [&](const std::string &name) {
      if (name.empty())
        return name;
      auto it = names.find(name);
      return it != names.end() ? it->second : prefix + name;
    };
    for (const auto &body : fp.node()) {
      if (++inlinedNodes > kMaxInlinedNodes)
        throw LoadError("inlining function '" + n.op_type() + "' of domain '" +
                        n.domain() + "' gives more than " +
                        std::to_string(kMaxInlinedNodes) + " nodes");
      ::onnx::NodeProto copy = body;
      copy.set_name(prefix + body.name());
      renameNode(copy, rename);
      resolveAttributes(copy, n, *f);
      emit(copy, out, depth + 1);
    }
  }

  template <typename F> void renameNode(::onnx::NodeProto &n, const F &rename) {
    for (auto &s : *n.mutable_input())
      s = rename(s);
    for (auto &s : *n.mutable_output())
      s = rename(s);
    for (auto &a : *n.mutable_attribute()) {
      if (a.has_g())
        renameGraph(*a.mutable_g(), rename);
      for (auto &g : *a.mutable_graphs())
        renameGraph(g, rename);
    }
  }

  // A subgraph inside a function body: every name in it is the function's
  // (its own or the body's), so all take the call's prefix.
  template <typename F>
  void renameGraph(::onnx::GraphProto &g, const F &rename) {
    for (auto &n : *g.mutable_node())
      renameNode(n, rename);
    for (auto *list : {g.mutable_input(), g.mutable_output(),
                       g.mutable_value_info()})
      for (auto &v : *list)
        v.set_name(rename(v.name()));
    for (auto &t : *g.mutable_initializer())
      t.set_name(rename(t.name()));
  }

  // Attribute references take the call's attribute or the default; one
  // with neither is left out, as ONNX's function semantics say.
  static void resolveAttributes(::onnx::NodeProto &n,
                                const ::onnx::NodeProto &call,
                                const Function &f) {
    ::google::protobuf::RepeatedPtrField<::onnx::AttributeProto> kept;
    for (auto &a : *n.mutable_attribute()) {
      if (a.ref_attr_name().empty()) {
        *kept.Add() = std::move(a);
        continue;
      }
      const ::onnx::AttributeProto *source = nullptr;
      for (const auto &ca : call.attribute())
        if (ca.name() == a.ref_attr_name())
          source = &ca;
      auto def = f.defaults.find(a.ref_attr_name());
      if (!source && def != f.defaults.end())
        source = &def->second;
      if (!source)
        continue;
      ::onnx::AttributeProto resolved = *source;
      resolved.set_name(a.name());
      resolved.clear_ref_attr_name();
      *kept.Add() = std::move(resolved);
    }
    n.mutable_attribute()->Swap(&kept);
  }
};

} // namespace

void inlineLocalFunctions(::onnx::ModelProto &model) {
  if (model.functions_size() == 0 || !model.has_graph())
    return;
  Inliner inliner(model);
  inliner.inlineGraph(*model.mutable_graph(), 0);
}

} // namespace orrery::onnx::detail
