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


def FuseKernelsPass : Pass<"orrery-fuse-kernels", "mlir::ModuleOp"> {
  let summary = "Rewrite the regions modern stacks run as one kernel into fused ops";
  let description = [{
    Finds in every function the graphs that FlashAttention, Transformer
    Engine and Megatron-Core run as one kernel and rewrites each into a
    fused op with its own cost (OrreryFusedOps.td):

    - scaled dot-product attention: MatMul(Q, Kᵀ) → scalar scales (on the
      scores, or on Q and Kᵀ as torch's SDPA export writes) → masks and
      biases (Add, Where) → Softmax → Dropout / Cast / NaN guard →
      MatMul(·, V) becomes `orrery.fused_attention`. Keys and values
      repeated for grouped-query attention (Reshape / Expand / Tile) are
      taken before the repeat, Kᵀ also when written with its leading dims
      flattened (reshape, transpose, reshape: dynamo's SDPA). A mask computed without the data whose
      ancestry holds a triangle (Trilu) or a comparison of positions
      (Less, LessOrEqual, ... of Range values) is the `causal` attribute
      and leaves the graph; a mask that depends on the data (padding) stays
      an operand, and marks the op causal too when its ancestry has the
      triangle. Ops of the region used outside it keep the region unfused.
    - RMSNorm written out: x · 1/sqrt(mean(x²) + ε) (or x / sqrt(...)),
      times a scale, becomes `orrery.rms_normalization`.
    - SwiGLU and GeGLU: (gate · sigmoid(gate)) · up and gelu(gate) · up
      become `orrery.gated_activation`.
    - Rotary embeddings: x · cos + concat(-x₂, x₁) · sin becomes
      `orrery.rotary_embedding`.

    Bias + GELU and bias + dropout + add chains are priced as one kernel by
    the workload's elementwise fusion and are left as they are.

    ```mlir
    // before
    %s = orrery.matmul(%q, %kt) : ... -> tensor<1x16x128x128xf16>
    %t = orrery.mul(%s, %scale) : ...
    %m = orrery.add(%t, %causal) : ...
    %p = orrery.softmax(%m) {axis = -1 : i64} : ...
    %o = orrery.matmul(%p, %v) : ... -> tensor<1x16x128x64xf16>
    // after
    %o = orrery.fused_attention(%q, %k, %v) {batch = 1 : i64, heads = 16 : i64,
        kv_heads = 16 : i64, q_len = 128 : i64, kv_len = 128 : i64,
        head_dim = 64 : i64, value_dim = 64 : i64, causal, scale = 0.125 : f64,
        dropout = 0.0 : f64} : ...
    ```
  }];
  let options = [
    Option<"attention", "attention", "bool", "true",
           "fuse scaled dot-product attention">,
    Option<"norms", "norms", "bool", "true", "fuse written-out RMSNorm">,
    Option<"gatedActivations", "gated-activations", "bool", "true",
           "fuse SwiGLU and GeGLU">,
    Option<"rotary", "rotary", "bool", "true", "fuse rotary embeddings">,
  ];
  let dependentDialects = ["::orrery::OrreryDialect"];
}

def FormExpertsPass : Pass<"orrery-form-experts", "mlir::ModuleOp"> {
  let summary = "Rewrite mixture-of-experts layers as exporters write them into dispatched expert GEMMs";
  let description = [{
    transformers' batched experts (`batched_mm`, the form its torch.export
    path writes for Mixtral, Qwen2/Qwen3-MoE, DeepSeek-V3, GPT-OSS and
    Llama 4) select one expert matrix per routed token and multiply it by
    that token alone:

    ```mlir
    %ids = ... TopK(router)#1, flattened to [S]        // S = tokens x top-k
    %sel = orrery.gather(%w, %ids) {axis = 0}          // [E, p, q] -> [S, p, q]
    %y = orrery.matmul(%sel, %x)                       // [S, q, 1] -> [S, p, 1]
    ```

    (or GatherND with [S, 1] indices, or `matmul(%x [S, 1, p], %sel)`).
    The graph holds S copies of an expert's matrix; what a framework runs
    is one grouped GEMM over the tokens dispatched to each expert. The pass
    writes that form, the one Megatron-Core's grouped MLP and the
    generator's MoE use, so expert parallelism and the cost model see the
    layer's experts:

    ```mlir
    %X = orrery.reshape(%x) : [E, S/E, q]              // balanced routing
    %Y = orrery.matmul(%X, transpose(%w))              // [E, S/E, p]
    %y = orrery.reshape(%Y) : [S, p, 1]
    ```

    Routing is priced balanced (S/E tokens per expert; moe_imbalance in the
    strategy skews it). When E does not divide S the tokens are gathered
    into ceil(S/E) rows per expert and gathered back. Only selections
    whose indices come from a TopK are rewritten.
  }];
  let dependentDialects = ["::orrery::OrreryDialect"];
}

#endif // ORRERY_TRANSFORMS_PASSES_TD
