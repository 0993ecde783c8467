//===- OrreryBase.td - the orrery dialect and its cost interface ---------===//
//
// The dialect holds a training graph imported from ONNX: tensors with static
// shapes and no data. Every op answers the cost questions the planner asks
// through CostOpInterface.
//
//===----------------------------------------------------------------------===//

#ifndef ORRERY_DIALECT_ORRERYBASE_TD
#define ORRERY_DIALECT_ORRERYBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Orrery_Dialect : Dialect {
  let name = "orrery";
  let cppNamespace = "::orrery";
  let summary = "A shape-only training graph for parallelism planning";
  let description = [{
    The `orrery` dialect holds a neural network imported from ONNX as tensors
    with static shapes and element types but no data: weights are
    `orrery.weight` values that carry a name and a type, never bytes. Ops
    mirror the ONNX operators that real networks use; any other operator is
    kept by `orrery.onnx_op` with its type, domain and attributes, so nothing
    is dropped silently. Every op implements `CostOpInterface`, which states
    forward and backward FLOPs, bytes moved, parameters and the activations
    the backward pass keeps.

    ```mlir
    %w = orrery.weight "fc.weight" trainable : tensor<768x3072xf16>
    %y = orrery.matmul(%x, %w) : (tensor<8x768xf16>, tensor<768x3072xf16>) -> tensor<8x3072xf16>
    ```
  }];
}

def Orrery_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::orrery";
  let description = [{
    The cost of one execution of an op, derived from its static tensor types.
    FLOPs count a multiply-add as two operations. Bytes count each tensor
    operand read once and each result written once (the roofline's memory
    term). The parameter count belongs to `orrery.weight` alone, so a weight
    used twice (tied embedding and head) is counted once. Saved values are
    the tensors the backward pass reads; a caller summing them over a graph
    must count each value once.
  }];
  let methods = [
    InterfaceMethod<"Forward FLOPs of one execution.", "int64_t",
      "getForwardFlops", (ins), "",
      "return ::orrery::detail::defaultForwardFlops($_op.getOperation());">,
    InterfaceMethod<[{Backward FLOPs: twice the forward FLOPs for
      contractions (a gradient for each input), once for everything else.}],
      "int64_t", "getBackwardFlops", (ins), "",
      "return ::orrery::detail::defaultBackwardFlops($_op.getOperation());">,
    InterfaceMethod<"Bytes read: every tensor operand once.", "int64_t",
      "getBytesRead", (ins), "",
      "return ::orrery::detail::defaultBytesRead($_op.getOperation());">,
    InterfaceMethod<"Bytes written: every result once.", "int64_t",
      "getBytesWritten", (ins), "",
      "return ::orrery::detail::defaultBytesWritten($_op.getOperation());">,
    InterfaceMethod<"Trainable parameters this op defines.", "int64_t",
      "getParameterCount", (ins), "", "return 0;">,
    InterfaceMethod<[{Appends the tensors that the backward pass of this op
      reads (activations only; weights and constants are not activations).}],
      "void", "getSavedForBackward",
      (ins "::llvm::SmallVectorImpl<::mlir::Value> &":$saved), "",
      "::orrery::detail::defaultSavedForBackward($_op.getOperation(), saved);">,
    InterfaceMethod<[{Bytes the backward pass needs that are not a tensor of
      the graph, such as a dropout mask of one byte per element.}],
      "int64_t", "getExtraSavedBytes", (ins), "", "return 0;">,
    InterfaceMethod<[{How a tensor-parallel group may split this op: a mask
      of `::orrery::SplitOption` (follow its input's split, batch, column,
      row, spatial with a halo, vocabulary); replicating is always possible.
      By default an op with an activation operand follows its input's split
      and splits by batch or spatially; contractions, normalizations,
      reductions, pooling and data movement state their own.}],
      "unsigned", "getSplitOptions", (ins), "",
      "return ::orrery::detail::defaultSplitOptions($_op.getOperation());">,
    InterfaceMethod<[{Bytes each rank sends its neighbours when a spatial
      split cuts this op's input (the kernel's overlap, k - 1 rows of the
      first spatial dimension), forward; as many come back in backward.}],
      "int64_t", "getHaloBytes", (ins), "", "return 0;">,
  ];
  let extraClassDeclaration = [{
    /// Bytes of the activations this op alone keeps for the backward pass.
    int64_t getSavedActivationBytes();
  }];
}

#endif // ORRERY_DIALECT_ORRERYBASE_TD
