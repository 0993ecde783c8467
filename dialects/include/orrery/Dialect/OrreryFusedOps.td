//===- OrreryFusedOps.td - fused kernels of the orrery dialect -----------===//
//
// Ops that no ONNX file holds: `orrery-fuse-kernels` writes them where it
// finds the graph that a modern training stack runs as one kernel
// (FlashAttention, Transformer Engine's fused RMSNorm, Megatron-Core's fused
// SwiGLU and rotary embedding). Each states its own cost: what that kernel
// computes, moves and keeps, not what the ops it replaced would.
//
//===----------------------------------------------------------------------===//

#ifndef ORRERY_DIALECT_ORRERYFUSEDOPS_TD
#define ORRERY_DIALECT_ORRERYFUSEDOPS_TD

def Orrery_FusedAttentionOp : Orrery_Op<"fused_attention",
    ["getForwardFlops", "getBackwardFlops", "getBytesRead", "getBytesWritten",
     "getSavedForBackward", "getExtraSavedBytes", "getSplitOptions"], [Pure]> {
  let summary = "scaled dot-product attention as one fused kernel";
  let description = [{
    softmax(scale · Q·Kᵀ + bias, causal) · V as FlashAttention-2/3 and
    cuDNN's fused attention run it: the [q_len, kv_len] scores never reach
    memory. `query` holds `batch · heads · q_len · head_dim` elements,
    `key` `batch · kv_heads · kv_len · head_dim` and `value` `batch ·
    kv_heads · kv_len · value_dim` (grouped-query attention when kv_heads <
    heads: each key-value head serves heads / kv_heads queries); the
    result `batch · heads · q_len · value_dim`. The attributes give the
    shapes, so any layout of the operands is allowed. `bias` is an additive
    mask or bias that depends on the data (a padding mask); a causal mask
    built in the graph is the `causal` attribute, not an operand. `dropout`
    is applied to the probabilities inside the kernel (it keeps the random
    generator's state, not a mask). `window` (with `causal`): sliding-window
    attention, each query seeing itself and the `window` - 1 keys before it
    (Mistral, Gemma's local layers; FlashAttention's window_size), a band
    mask built in the graph.
    `latent_dim` (with `rope_dim`): multi-head latent attention
    (DeepSeek-V2/V3): every head's key and value are up-projected from one
    per-token latent of `latent_dim` elements, and the last `rope_dim` of
    each key's `head_dim` are a rotary part computed once per token and
    shared by the heads. Training runs it as the attention of its heads
    (these attributes change nothing there); an engine caches the latent
    and the rotary part, `latent_dim + rope_dim` elements a token for all
    heads, and decodes with the up-projections absorbed: a query of
    `latent_dim + rope_dim` against that cache, values of `latent_dim`.
    `sinks`: attention sinks (GPT-OSS): a learned logit per head joins each
    row's softmax as one more key with no value, the sink column dropped
    before the values (FlashAttention-3's and TensorRT-LLM's sink kernels);
    its cost is the kernel's, the sink logits (one a head) are left out.

    Cost: forward 2 · batch · heads · q_len · kv_len · (head_dim +
    value_dim) FLOPs times the fraction of 128 × 128 blocks the kernel
    computes (1; under a causal mask the blocks on and below the diagonal,
    (n + 1) / 2n of them for n blocks per side: the diagonal blocks are
    computed whole; under a window, the blocks that hold a key of the band). Backward 2.5 × forward (its five GEMMs, recomputing
    the scores). Bytes: the operands read and the result and the
    log-sum-exp rows (fp32, batch · heads · q_len) written: O(s · d), not
    O(s²). Keeps Q, K, V, the output and the log-sum-exp rows.

    ```mlir
    %o = orrery.fused_attention(%q, %k, %v) {batch = 1 : i64, heads = 32 : i64,
        kv_heads = 8 : i64, q_len = 2048 : i64, kv_len = 2048 : i64,
        head_dim = 128 : i64, value_dim = 128 : i64, causal,
        scale = 0.088388 : f64, dropout = 0.0 : f64}
        : (tensor<1x32x2048x128xbf16>, tensor<1x8x2048x128xbf16>,
           tensor<1x8x2048x128xbf16>) -> tensor<1x32x2048x128xbf16>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$query, AnyRankedTensor:$key,
                       AnyRankedTensor:$value,
                       Optional<AnyRankedTensor>:$bias,
                       I64Attr:$batch, I64Attr:$heads, I64Attr:$kv_heads,
                       I64Attr:$q_len, I64Attr:$kv_len, I64Attr:$head_dim,
                       I64Attr:$value_dim, UnitAttr:$causal, F64Attr:$scale,
                       F64Attr:$dropout, OptionalAttr<I64Attr>:$window,
                       OptionalAttr<I64Attr>:$latent_dim,
                       OptionalAttr<I64Attr>:$rope_dim,
                       UnitAttr:$sinks);
  let results = (outs AnyRankedTensor:$output);
  let assemblyFormat =
      "`(` $query `,` $key `,` $value (`,` $bias^)? `)` attr-dict `:` "
      "functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The fraction of the score blocks the kernel computes (1 without a
    /// causal mask).
    double computedBlockFraction();
  }];
}

def Orrery_RmsNormalizationOp : Orrery_Op<"rms_normalization",
    ["getForwardFlops", "getSavedForBackward", "getExtraSavedBytes",
     "getSplitOptions"], [Pure]> {
  let summary = "RMSNorm over the last axis as one fused kernel";
  let description = [{
    x / sqrt(mean(x², last axis) + epsilon) · scale, as Transformer
    Engine's and Apex's fused RMSNorm run it (written by
    `orrery-fuse-kernels` for the ReduceMean / Pow / Sqrt / Div chains
    exporters write).

    Cost: 4 FLOP per element forward (square, mean, reciprocal root,
    scale), as many backward. Keeps the input and one fp32 reciprocal root
    per row.

    Tensor parallelism: a hidden state `[.., tokens, features]` split by its
    features would leave each rank part of every row the norm reduces, so
    the norm takes it whole (Megatron keeps the residual stream replicated,
    or split by tokens); a per-head norm (`[.., heads, tokens, head_dim]`,
    Qwen3's q and k norms) follows the heads' split.

    ```mlir
    %y = orrery.rms_normalization(%x, %g) {epsilon = 1.0e-5 : f64}
        : (tensor<1x2048x4096xbf16>, tensor<4096xbf16>) -> tensor<1x2048x4096xbf16>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, Optional<AnyRankedTensor>:$scale,
                       F64Attr:$epsilon);
  let results = (outs AnyRankedTensor:$output);
  let assemblyFormat =
      "`(` $input (`,` $scale^)? `)` attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Orrery_GatedActivationOp : Orrery_Op<"gated_activation",
    ["getForwardFlops", "getSavedForBackward"], [Pure]> {
  let summary = "a gated linear unit's activation (SwiGLU, GeGLU) as one kernel";
  let description = [{
    act(gate) · up, as Megatron-Core's fused `bias_swiglu` / `bias_geglu`
    and Transformer Engine run it; `activation` is `silu` or `gelu`.

    `weights`: one scale a row, broadcast over the last axis (a mixture of
    experts' routing weights, as Megatron-Core's `weighted_bias_swiglu`
    applies the permuted probabilities inside the kernel).

    Cost: 6 FLOP per output element forward (silu or gelu, then the
    product; 7 with weights), as many backward. Keeps `gate`, `up` and
    `weights` (the kernel's input), not the activation or the products.

    ```mlir
    %h = orrery.gated_activation(%gate, %up) {activation = "silu"}
        : (tensor<1x2048x14336xbf16>, tensor<1x2048x14336xbf16>) -> tensor<1x2048x14336xbf16>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$gate, AnyRankedTensor:$up,
                       Optional<AnyRankedTensor>:$weights,
                       StrAttr:$activation);
  let results = (outs AnyRankedTensor:$output);
  let assemblyFormat =
      "`(` $gate `,` $up (`,` $weights^)? `)` attr-dict `:` "
      "functional-type(operands, results)";
  let hasVerifier = 1;
}

def Orrery_RotaryEmbeddingOp : Orrery_Op<"rotary_embedding",
    ["getForwardFlops", "getBytesRead", "getSavedForBackward"], [Pure]> {
  let summary = "rotary position embedding (RoPE) as one fused kernel";
  let description = [{
    x · cos + rotate_half(x) · sin over the last axis, as Megatron-Core's
    fused RoPE (`--apply-rope-fusion`) and Transformer Engine run it. `cos`
    and `sin` are tables computed from positions, not activations.

    Cost: 3 FLOP per element forward and backward; reads x (the tables
    stay in cache across heads) and writes the result. Keeps nothing:
    the backward rotates the gradient back with the same tables.

    ```mlir
    %r = orrery.rotary_embedding(%q, %cos, %sin)
        : (tensor<1x32x2048x128xbf16>, tensor<2048x128xbf16>, tensor<2048x128xbf16>) -> tensor<1x32x2048x128xbf16>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$cos,
                       AnyRankedTensor:$sin);
  let results = (outs AnyRankedTensor:$output);
  let assemblyFormat =
      "`(` $input `,` $cos `,` $sin `)` attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

#endif // ORRERY_DIALECT_ORRERYFUSEDOPS_TD
