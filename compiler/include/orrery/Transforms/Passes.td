//===- Passes.td - orrery passes ------------------------------------------===//
#ifndef ORRERY_TRANSFORMS_PASSES_TD
#define ORRERY_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def AnnotateCostsPass : Pass<"orrery-annotate-costs", "mlir::ModuleOp"> {
  let summary = "Attach each op's cost as an `orrery.cost` attribute";
  let description = [{
    Writes what CostOpInterface reports for every op into a dictionary
    attribute, so costs can be read in the IR and checked by FileCheck:

    ```mlir
    %0 = orrery.matmul(%x, %w) {orrery.cost = {bwd_flops = 3072 : i64,
        bytes_read = 8704 : i64, bytes_written = 512 : i64,
        fwd_flops = 1536 : i64, params = 0 : i64, saved_bytes = 256 : i64}}
        : (tensor<2x64xf32>, tensor<64x12xf32>) -> tensor<2x12xf32>
    ```
  }];
  let dependentDialects = ["::orrery::OrreryDialect"];
}

def OutlineLayersPass : Pass<"orrery-outline-layers", "mlir::ModuleOp"> {
  let summary = "Find the repeated block and outline each layer kind as a function";
  let description = [{
    Finds the model's repeated blocks (96 identical decoder layers, ResNet
    bottlenecks, encoder and decoder layers) in `@main` and outlines every
    part of the model into a private function per layer kind; `@main` keeps
    the weights and becomes a sequence of calls:

    ```mlir
    func.func @main(%ids: tensor<1x2048xi64>) -> tensor<1x2048x50257xf16> {
      %e = call @embedding(%ids, %wte, %wpe) : ...
      %l0 = call @transformer_layer(%e, %w0_qkv, ...) : ...
      ...
      %l95 = call @transformer_layer(%l94, %w95_qkv, ...) : ...
      %y = call @head(%l95, %wte, ...) : ...
      return %y : ...
    }
    ```

    How: each op gets a signature (name, types, attributes, and whether each
    operand is an activation, a weight or which constant). Candidate periods
    are the distances between repeated signatures; for each, runs of ops
    equal to the op one period later give a block repeated `count` times.
    Among phases of a run, the boundary crossed by the fewest live
    activations wins (a layer boundary carries the residual stream only).
    A run is kept only if its instances have the same dataflow, op for op,
    and its block holds a contraction (MatMul, Gemm, Conv, a recurrent op).
    The largest coverage wins; the parts before and after are searched the
    same way; what no repeat covers becomes a layer kind of count one
    (`embedding`/`stem`, `transition`, `head`). Weight arguments carry the
    `orrery.weight` argument attribute (true when trainable).
  }];
  let dependentDialects = ["::mlir::func::FuncDialect"];
}

#endif // ORRERY_TRANSFORMS_PASSES_TD
