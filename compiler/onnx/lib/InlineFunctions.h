//===- InlineFunctions.h - model-local ONNX functions inlined (internal) --===//
#ifndef ORRERY_ONNX_LIB_INLINEFUNCTIONS_H
#define ORRERY_ONNX_LIB_INLINEFUNCTIONS_H

#include "onnx/onnx_pb.h"

namespace orrery::onnx::detail {

/// Replaces every call of one of the model's own functions (ModelProto's
/// `functions`: torch's dynamo exporter writes each module as one, in
/// domains such as "pkg.transformers") by the function's body, in every
/// graph and subgraph: formal inputs and outputs become the call's values,
/// the body's other values get a prefix of their own per call, attribute
/// references (`ref_attr_name`) take the call's attribute or the function's
/// default. Throws LoadError on a function defined twice, calls nested
/// deeper than 64 (a recursive function) or more than 2^20 inlined nodes.
void inlineLocalFunctions(::onnx::ModelProto &model);

} // namespace orrery::onnx::detail

#endif // ORRERY_ONNX_LIB_INLINEFUNCTIONS_H
