// RUN: orrery-opt %s -split-input-file -verify-diagnostics

func.func @arity(%x: tensor<4xf32>) {
  // expected-error @+1 {{'orrery.relu' op takes 1 to 1 operands, got 2}}
  %0 = orrery.relu(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @results(%x: tensor<4xf32>) {
  // expected-error @+1 {{'orrery.softmax' op gives 1 to 1 results, got 2}}
  %0:2 = orrery.softmax(%x) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @broadcast(%x: tensor<4x8xf32>, %y: tensor<3xf32>) {
  // expected-error @+1 {{'orrery.add' op operand shapes do not broadcast: dimension 1 is 8 and 3}}
  %0 = orrery.add(%x, %y) : (tensor<4x8xf32>, tensor<3xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @matmul(%x: tensor<4x8xf32>, %w: tensor<6x2xf32>) {
  // expected-error @+1 {{'orrery.matmul' op contraction dimensions differ: 8 vs 6}}
  %0 = orrery.matmul(%x, %w) : (tensor<4x8xf32>, tensor<6x2xf32>) -> tensor<4x2xf32>
  return
}

// -----

func.func @conv(%x: tensor<1x6x8x8xf32>, %w: tensor<4x4x3x3xf32>) {
  // expected-error @+1 {{'orrery.conv' op input channels 6 differ from weight channels 4 times group 2}}
  %0 = orrery.conv(%x, %w) {group = 2 : i64} : (tensor<1x6x8x8xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
  return
}

// -----

func.func @conv_rank(%x: tensor<6x8xf32>, %w: tensor<4x4xf32>) {
  // expected-error @+1 {{'orrery.conv' op input and weight must have the same rank >= 3}}
  %0 = orrery.conv(%x, %w) : (tensor<6x8xf32>, tensor<4x4xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @yield_outside(%x: tensor<4xf32>) {
  // expected-error @+1 {{'orrery.yield' op expects parent op to be one of 'orrery.if, orrery.loop, orrery.scan'}}
  orrery.yield %x : tensor<4xf32>
}

// -----

func.func @constant_type() {
  // expected-error @+1 {{'orrery.constant' op failed to verify that all of {value, output} have same type}}
  %0 = "orrery.constant"() {value = dense<1> : tensor<2xi64>} : () -> tensor<3xi64>
  return
}

// -----

func.func @attention_heads(%q: tensor<1x4x8x16xf16>, %k: tensor<1x3x8x16xf16>) -> tensor<1x4x8x16xf16> {
  // expected-error @+1 {{kv_heads 3 must divide heads 4}}
  %o = orrery.fused_attention(%q, %k, %k) {batch = 1 : i64, heads = 4 : i64, kv_heads = 3 : i64, q_len = 8 : i64, kv_len = 8 : i64, head_dim = 16 : i64, value_dim = 16 : i64, scale = 0.25 : f64, dropout = 0.0 : f64} : (tensor<1x4x8x16xf16>, tensor<1x3x8x16xf16>, tensor<1x3x8x16xf16>) -> tensor<1x4x8x16xf16>
  return %o : tensor<1x4x8x16xf16>
}

// -----

func.func @attention_shape(%q: tensor<1x4x8x16xf16>) -> tensor<1x4x8x16xf16> {
  // expected-error @+1 {{key has 512 elements; the attributes give 256}}
  %o = orrery.fused_attention(%q, %q, %q) {batch = 1 : i64, heads = 4 : i64, kv_heads = 2 : i64, q_len = 8 : i64, kv_len = 8 : i64, head_dim = 16 : i64, value_dim = 16 : i64, scale = 0.25 : f64, dropout = 0.0 : f64} : (tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>) -> tensor<1x4x8x16xf16>
  return %o : tensor<1x4x8x16xf16>
}

// -----

func.func @attention_window(%q: tensor<1x4x8x16xf16>) -> tensor<1x4x8x16xf16> {
  // expected-error @+1 {{window must be positive, got 0}}
  %o = orrery.fused_attention(%q, %q, %q) {batch = 1 : i64, heads = 4 : i64, kv_heads = 4 : i64, q_len = 8 : i64, kv_len = 8 : i64, head_dim = 16 : i64, value_dim = 16 : i64, scale = 0.25 : f64, dropout = 0.0 : f64, causal, window = 0 : i64} : (tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>) -> tensor<1x4x8x16xf16>
  return %o : tensor<1x4x8x16xf16>
}

// -----

func.func @attention_window_without_causal(%q: tensor<1x4x8x16xf16>) -> tensor<1x4x8x16xf16> {
  // expected-error @+1 {{a window needs the causal mask}}
  %o = orrery.fused_attention(%q, %q, %q) {batch = 1 : i64, heads = 4 : i64, kv_heads = 4 : i64, q_len = 8 : i64, kv_len = 8 : i64, head_dim = 16 : i64, value_dim = 16 : i64, scale = 0.25 : f64, dropout = 0.0 : f64, window = 4 : i64} : (tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>) -> tensor<1x4x8x16xf16>
  return %o : tensor<1x4x8x16xf16>
}

// -----

func.func @gated(%g: tensor<1x4x64xf16>) -> tensor<1x4x64xf16> {
  // expected-error @+1 {{activation must be 'silu' or 'gelu', got 'relu'}}
  %o = orrery.gated_activation(%g, %g) {activation = "relu"} : (tensor<1x4x64xf16>, tensor<1x4x64xf16>) -> tensor<1x4x64xf16>
  return %o : tensor<1x4x64xf16>
}

// -----

func.func @rope_without_latent(%q: tensor<1x4x8x16xf16>) -> tensor<1x4x8x16xf16> {
  // expected-error @+1 {{rope_dim needs latent_dim}}
  %o = orrery.fused_attention(%q, %q, %q) {batch = 1 : i64, heads = 4 : i64, kv_heads = 4 : i64, q_len = 8 : i64, kv_len = 8 : i64, head_dim = 16 : i64, value_dim = 16 : i64, scale = 0.25 : f64, dropout = 0.0 : f64, rope_dim = 4 : i64} : (tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>) -> tensor<1x4x8x16xf16>
  return %o : tensor<1x4x8x16xf16>
}

// -----

func.func @latent_rope_too_wide(%q: tensor<1x4x8x16xf16>) -> tensor<1x4x8x16xf16> {
  // expected-error @+1 {{latent_dim 32 and rope_dim 16 must be positive and below head_dim 16}}
  %o = orrery.fused_attention(%q, %q, %q) {batch = 1 : i64, heads = 4 : i64, kv_heads = 4 : i64, q_len = 8 : i64, kv_len = 8 : i64, head_dim = 16 : i64, value_dim = 16 : i64, scale = 0.25 : f64, dropout = 0.0 : f64, latent_dim = 32 : i64, rope_dim = 16 : i64} : (tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>, tensor<1x4x8x16xf16>) -> tensor<1x4x8x16xf16>
  return %o : tensor<1x4x8x16xf16>
}
