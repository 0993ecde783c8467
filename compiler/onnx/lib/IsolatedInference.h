//===- IsolatedInference.h - ONNX's shape inference, crash-proof (internal) ===//
#ifndef ORRERY_ONNX_LIB_ISOLATEDINFERENCE_H
#define ORRERY_ONNX_LIB_ISOLATEDINFERENCE_H

#include "onnx/onnx_pb.h"

namespace orrery::onnx::detail {

/// Runs ONNX's own shape inference on `model` in a forked child process and
/// returns in `shapes` the value_info and outputs it gives the top graph. ONNX 1.12
/// trusts the file: on some malformed nodes (a Conv with a scalar weight,
/// onnx/onnx#6180) it reads past a shape and dies with SIGSEGV, which no
/// try/catch can stop. A child that crashes or fails costs only the shapes
/// it would have found: returns false, and our own rules (which check every
/// operand) decide alone.
bool inferShapesIsolated(const ::onnx::ModelProto &model,
                         ::onnx::GraphProto &shapes);

} // namespace orrery::onnx::detail

#endif // ORRERY_ONNX_LIB_ISOLATEDINFERENCE_H
