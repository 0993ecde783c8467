//===- Inference.h - shape rules and constant folding (internal) ----------===//
#ifndef ORRERY_ONNX_LIB_INFERENCE_H
#define ORRERY_ONNX_LIB_INFERENCE_H

#include "orrery/Onnx/GraphDesc.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace orrery::onnx::detail {

/// The loader's internal error; caught at the library's boundary.
struct LoadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// A shape rule that needs an input's values (Reshape's shape, Resize's
/// scales, Range's bounds) which the graph computes from something not
/// folded: the loader then takes the shape the file states, or ONNX's own
/// inference (which propagates the bound dims through shape subgraphs),
/// and reports this only when neither has it.
struct NotConstantError : LoadError {
  using LoadError::LoadError;
};

/// "node '/Reshape' (Reshape)" for messages.
std::string describe(const NodeDesc &node);

const AttrDesc *findAttr(const NodeDesc &node, const std::string &name);
int64_t attrInt(const NodeDesc &node, const std::string &name, int64_t dflt);
double attrFloat(const NodeDesc &node, const std::string &name, double dflt);
std::string attrString(const NodeDesc &node, const std::string &name,
                       const std::string &dflt);
std::vector<int64_t> attrInts(const NodeDesc &node, const std::string &name);

/// Infers the outputs of `node` from its inputs (nullptr for an absent
/// optional input) and, when every input is a small constant and the op is
/// foldable, their values. Returns false when it has no rule for the op.
/// Throws LoadError when it has a rule but the inputs are wrong.
bool inferNode(const NodeDesc &node, int64_t opset,
               const std::vector<const ValueDesc *> &inputs,
               std::vector<ValueDesc> &outputs);

/// Largest tensor the loader accepts (elements); keeps every byte count of
/// the cost model inside int64_t.
constexpr int64_t kMaxTensorElements = int64_t(1) << 50;

/// Largest constant the folder computes (elements).
constexpr int64_t kMaxFoldElements = 1 << 16;

} // namespace orrery::onnx::detail

#endif // ORRERY_ONNX_LIB_INFERENCE_H
