//===- OrreryOps.td - ops of the orrery dialect --------------------------===//
//
// One op per ONNX operator that real networks use. Operands and results are
// variadic so that ONNX's optional inputs and outputs import unchanged; each
// op's verifier checks its arity. ONNX attributes travel as ordinary
// attributes under their ONNX names (`group`, `perm`, `axis`, ...), so nothing
// is dropped; the cost formulas read the few they need.
//
//===----------------------------------------------------------------------===//

#ifndef ORRERY_DIALECT_ORRERYOPS_TD
#define ORRERY_DIALECT_ORRERYOPS_TD

include "orrery/Dialect/OrreryBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/IR/OpBase.td"

def Orrery_TensorOrNone : AnyTypeOf<[AnyRankedTensor, NoneType]>;

class Orrery_Op<string mnemonic, list<string> costMethods = [],
                list<Trait> traits = []>
    : Op<Orrery_Dialect, mnemonic,
         traits # [DeclareOpInterfaceMethods<Orrery_CostOpInterface,
                                             costMethods>]>;

// An op imported from one ONNX operator. `cost` states the formulas in prose;
// `verifyBody` adds op-specific checks after the arity check.
class Orrery_GraphOp<string mnemonic, string onnxName, string summaryText,
                     string cost, int minIn, int maxIn, int minOut, int maxOut,
                     string example, list<string> costMethods = [],
                     list<Trait> traits = [], string verifyBody = "",
                     string extraDefs = "">
    : Orrery_Op<mnemonic, costMethods, !listconcat(traits, [Pure])> {
  let summary = summaryText;
  let description = !strconcat(
    "Imported from the ONNX operator `", onnxName, "`; its ONNX attributes ",
    "are kept under their ONNX names. Takes ", !cast<string>(minIn), " to ",
    !if(!lt(maxIn, 0), "any number of", !cast<string>(maxIn)),
    " operands (a missing optional input is a `none` value) and gives ",
    !cast<string>(minOut), " to ",
    !if(!lt(maxOut, 0), "any number of", !cast<string>(maxOut)),
    " results.\n\nCost: ", cost, "\n\n```mlir\n", example, "\n```\n");
  let arguments = (ins Variadic<Orrery_TensorOrNone>:$inputs);
  let results = (outs Variadic<AnyRankedTensor>:$outputs);
  let assemblyFormat =
      "`(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs)";
  let hasVerifier = 1;
  let extraClassDefinition = !strconcat(
    "::llvm::LogicalResult $cppClass::verify() {\n",
    "  if (::mlir::failed(::orrery::detail::verifyArity(getOperation(), ",
    !cast<string>(minIn), ", ", !cast<string>(maxIn), ", ",
    !cast<string>(minOut), ", ", !cast<string>(maxOut), ")))\n",
    "    return ::mlir::failure();\n", verifyBody,
    "  return ::mlir::success();\n}\n", extraDefs);
}

//===----------------------------------------------------------------------===//
// Elementwise ops.
//===----------------------------------------------------------------------===//

// An elementwise op with one input: `flops` FLOPs per output element.
class Orrery_UnaryOp<string mnemonic, string onnxName, int flops,
                     bit savesInput = 1>
    : Orrery_GraphOp<mnemonic, onnxName,
        "elementwise " # onnxName,
        !cast<string>(flops) # " FLOP per output element forward; backward as "
        # "many. " # !if(savesInput, "The backward pass keeps the input.",
                          "The backward pass keeps nothing."),
        1, 1, 1, 1,
        "%y = orrery." # mnemonic # "(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>",
        ["getForwardFlops", "getSavedForBackward"], [], "",
        "int64_t $cppClass::getForwardFlops() { return ::orrery::detail::"
        # "perOutputElementFlops(getOperation(), " # !cast<string>(flops) # "); }\n"
        # "void $cppClass::getSavedForBackward(::llvm::SmallVectorImpl<::mlir::Value> &saved) { "
        # !if(savesInput, "::orrery::detail::saveActivationOperands(getOperation(), saved); ", "")
        # "}\n">;

// An elementwise op on broadcast operands (NumPy rules).
class Orrery_BroadcastOp<string mnemonic, string onnxName, int flops,
                         bit savesInputs, int minIn = 2, int maxIn = 2>
    : Orrery_GraphOp<mnemonic, onnxName,
        "elementwise " # onnxName # " with broadcasting",
        !cast<string>(flops) # " FLOP per output element for each operand "
        # "after the first forward; backward as many. "
        # !if(savesInputs, "The backward pass keeps the operands that are "
               # "activations, unless the other operand is a constant.",
             "The backward pass keeps nothing."),
        minIn, maxIn, 1, 1,
        "%z = orrery." # mnemonic # "(%x, %y) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>",
        ["getForwardFlops", "getSavedForBackward"], [],
        "  return ::orrery::detail::verifyBroadcast(getOperation());\n",
        "int64_t $cppClass::getForwardFlops() { return ::orrery::detail::"
        # "perOutputElementFlops(getOperation(), " # !cast<string>(flops)
        # " * (int64_t(getOperation()->getNumOperands()) - 1)); }\n"
        # "void $cppClass::getSavedForBackward(::llvm::SmallVectorImpl<::mlir::Value> &saved) { "
        # !if(savesInputs, "::orrery::detail::saveNonConstantPairOperands(getOperation(), saved); ", "")
        # "}\n">;

def Orrery_AbsOp : Orrery_UnaryOp<"abs", "Abs", 1>;
def Orrery_NegOp : Orrery_UnaryOp<"neg", "Neg", 1, 0>;
def Orrery_ReluOp : Orrery_UnaryOp<"relu", "Relu", 1>;
def Orrery_LeakyReluOp : Orrery_UnaryOp<"leaky_relu", "LeakyRelu", 2>;
def Orrery_EluOp : Orrery_UnaryOp<"elu", "Elu", 4>;
def Orrery_SeluOp : Orrery_UnaryOp<"selu", "Selu", 5>;
def Orrery_SigmoidOp : Orrery_UnaryOp<"sigmoid", "Sigmoid", 4>;
def Orrery_HardSigmoidOp : Orrery_UnaryOp<"hard_sigmoid", "HardSigmoid", 3>;
def Orrery_HardSwishOp : Orrery_UnaryOp<"hard_swish", "HardSwish", 4>;
def Orrery_TanhOp : Orrery_UnaryOp<"tanh", "Tanh", 4>;
def Orrery_ErfOp : Orrery_UnaryOp<"erf", "Erf", 4>;
def Orrery_GeluOp : Orrery_UnaryOp<"gelu", "Gelu", 8>;
def Orrery_SoftplusOp : Orrery_UnaryOp<"softplus", "Softplus", 3>;
def Orrery_ExpOp : Orrery_UnaryOp<"exp", "Exp", 1>;
def Orrery_LogOp : Orrery_UnaryOp<"log", "Log", 1>;
def Orrery_SqrtOp : Orrery_UnaryOp<"sqrt", "Sqrt", 1>;
def Orrery_ReciprocalOp : Orrery_UnaryOp<"reciprocal", "Reciprocal", 1>;
def Orrery_SinOp : Orrery_UnaryOp<"sin", "Sin", 1>;
def Orrery_CosOp : Orrery_UnaryOp<"cos", "Cos", 1>;
def Orrery_FloorOp : Orrery_UnaryOp<"floor", "Floor", 1, 0>;
def Orrery_CeilOp : Orrery_UnaryOp<"ceil", "Ceil", 1, 0>;
def Orrery_RoundOp : Orrery_UnaryOp<"round", "Round", 1, 0>;
def Orrery_SignOp : Orrery_UnaryOp<"sign", "Sign", 1, 0>;
def Orrery_NotOp : Orrery_UnaryOp<"not", "Not", 1, 0>;
def Orrery_IdentityOp : Orrery_UnaryOp<"identity", "Identity", 0, 0>;
def Orrery_CastOp : Orrery_UnaryOp<"cast", "Cast", 0, 0>;

def Orrery_AddOp : Orrery_BroadcastOp<"add", "Add", 1, 0>;
def Orrery_SubOp : Orrery_BroadcastOp<"sub", "Sub", 1, 0>;
def Orrery_MulOp : Orrery_BroadcastOp<"mul", "Mul", 1, 1>;
def Orrery_DivOp : Orrery_BroadcastOp<"div", "Div", 1, 1>;
def Orrery_PowOp : Orrery_BroadcastOp<"pow", "Pow", 2, 1>;
def Orrery_MaxOp : Orrery_BroadcastOp<"max", "Max", 1, 1, 1, -1>;
def Orrery_MinOp : Orrery_BroadcastOp<"min", "Min", 1, 1, 1, -1>;
def Orrery_SumOp : Orrery_BroadcastOp<"sum", "Sum", 1, 0, 1, -1>;
def Orrery_MeanOp : Orrery_BroadcastOp<"mean", "Mean", 1, 0, 1, -1>;
def Orrery_ModOp : Orrery_BroadcastOp<"mod", "Mod", 1, 0>;
def Orrery_PReluOp : Orrery_BroadcastOp<"prelu", "PRelu", 2, 1>;
def Orrery_EqualOp : Orrery_BroadcastOp<"equal", "Equal", 1, 0>;
def Orrery_LessOp : Orrery_BroadcastOp<"less", "Less", 1, 0>;
def Orrery_LessOrEqualOp : Orrery_BroadcastOp<"less_or_equal", "LessOrEqual", 1, 0>;
def Orrery_GreaterOp : Orrery_BroadcastOp<"greater", "Greater", 1, 0>;
def Orrery_GreaterOrEqualOp : Orrery_BroadcastOp<"greater_or_equal", "GreaterOrEqual", 1, 0>;
def Orrery_AndOp : Orrery_BroadcastOp<"and", "And", 1, 0>;
def Orrery_OrOp : Orrery_BroadcastOp<"or", "Or", 1, 0>;
def Orrery_XorOp : Orrery_BroadcastOp<"xor", "Xor", 1, 0>;
def Orrery_WhereOp : Orrery_BroadcastOp<"where", "Where", 1, 0, 3, 3>;

def Orrery_ClipOp : Orrery_GraphOp<"clip", "Clip", "elementwise clamp",
    "2 FLOP per output element forward, 1 backward; keeps the input.",
    1, 3, 1, 1, "%y = orrery.clip(%x, %lo, %hi) : (tensor<8xf32>, tensor<f32>, tensor<f32>) -> tensor<8xf32>",
    ["getForwardFlops", "getSavedForBackward"]>;

//===----------------------------------------------------------------------===//
// Contractions.
//===----------------------------------------------------------------------===//

def Orrery_MatMulOp : Orrery_GraphOp<"matmul", "MatMul",
    "matrix product with NumPy batch broadcasting",
    "2·B·M·N·K forward for an [B…, M, K] × [K, N] product; backward 4·B·M·N·K "
    "(a gradient for each input). Keeps every operand that is an activation.",
    2, 2, 1, 1,
    "%y = orrery.matmul(%x, %w) : (tensor<8x128x768xf16>, tensor<768x3072xf16>) -> tensor<8x128x3072xf16>",
    ["getForwardFlops", "getBackwardFlops", "getSavedForBackward",
     "getSplitOptions"], [],
    "  return ::orrery::detail::verifyMatMul(getOperation());\n",
    "unsigned $cppClass::getSplitOptions() { return ::orrery::detail::"
    "contractionSplitOptions(getOperation(), false); }\n">;

def Orrery_GemmOp : Orrery_GraphOp<"gemm", "Gemm",
    "general matrix multiply Y = alpha·op(A)·op(B) + beta·C",
    "2·M·N·K forward plus M·N when C is given; backward 4·M·N·K. Keeps the "
    "operands A and B that are activations.",
    2, 3, 1, 1,
    "%y = orrery.gemm(%a, %b, %c) {transB = 1 : i64} : (tensor<8x4096xf32>, tensor<1000x4096xf32>, tensor<1000xf32>) -> tensor<8x1000xf32>",
    ["getForwardFlops", "getBackwardFlops", "getSavedForBackward",
     "getSplitOptions"], [], "",
    "unsigned $cppClass::getSplitOptions() { return ::orrery::detail::"
    "contractionSplitOptions(getOperation(), false); }\n">;

def Orrery_ConvOp : Orrery_GraphOp<"conv", "Conv",
    "N-d convolution, grouped or depthwise",
    "2·|Y|·(C_in/group)·∏kernel forward, plus |Y| for the bias; backward "
    "twice the contraction term (input and weight gradients). Keeps the input.",
    2, 3, 1, 1,
    "%y = orrery.conv(%x, %w) {strides = array<i64: 2, 2>, pads = array<i64: 3, 3, 3, 3>} : (tensor<1x3x224x224xf32>, tensor<64x3x7x7xf32>) -> tensor<1x64x112x112xf32>",
    ["getForwardFlops", "getBackwardFlops", "getSavedForBackward",
     "getSplitOptions", "getHaloBytes"], [],
    "  return ::orrery::detail::verifyConv(getOperation());\n",
    "unsigned $cppClass::getSplitOptions() { return ::orrery::detail::"
    "contractionSplitOptions(getOperation(), true); }\n"
    "int64_t $cppClass::getHaloBytes() { return ::orrery::detail::"
    "kernelHaloBytes(getOperation()); }\n">;

def Orrery_ConvTransposeOp : Orrery_GraphOp<"conv_transpose", "ConvTranspose",
    "N-d transposed convolution",
    "2·|X|·(C_out/group)·∏kernel forward plus |Y| for the bias; backward twice "
    "the contraction term. Keeps the input.",
    2, 3, 1, 1,
    "%y = orrery.conv_transpose(%x, %w) {strides = array<i64: 2, 2>} : (tensor<1x64x40x40xf32>, tensor<64x64x2x2xf32>) -> tensor<1x64x80x80xf32>",
    ["getForwardFlops", "getBackwardFlops", "getSavedForBackward",
     "getSplitOptions"], [], "",
    "unsigned $cppClass::getSplitOptions() { return ::orrery::detail::"
    "contractionSplitOptions(getOperation(), false); }\n">;

//===----------------------------------------------------------------------===//
// Normalizations, softmax, dropout.
//===----------------------------------------------------------------------===//

def Orrery_BatchNormalizationOp : Orrery_GraphOp<"batch_normalization",
    "BatchNormalization", "batch normalization (training keeps statistics)",
    "8 FLOP per element forward (mean, variance, normalize, scale, shift), "
    "as many backward. Keeps the input.",
    5, 5, 1, 3,
    "%y, %m, %v = orrery.batch_normalization(%x, %s, %b, %rm, %rv) : (tensor<8x64x56x56xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>) -> (tensor<8x64x56x56xf32>, tensor<64xf32>, tensor<64xf32>)",
    ["getForwardFlops", "getSavedForBackward"]>;

def Orrery_LayerNormalizationOp : Orrery_GraphOp<"layer_normalization",
    "LayerNormalization", "layer normalization over the trailing axes",
    "8 FLOP per element forward, as many backward. Keeps the input.",
    2, 3, 1, 3,
    "%y = orrery.layer_normalization(%x, %g, %b) {axis = -1 : i64} : (tensor<8x128x768xf32>, tensor<768xf32>, tensor<768xf32>) -> tensor<8x128x768xf32>",
    ["getForwardFlops", "getSavedForBackward"]>;

def Orrery_InstanceNormalizationOp : Orrery_GraphOp<"instance_normalization",
    "InstanceNormalization", "instance normalization",
    "8 FLOP per element forward, as many backward. Keeps the input.",
    3, 3, 1, 1,
    "%y = orrery.instance_normalization(%x, %s, %b) : (tensor<1x64x32x32xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<1x64x32x32xf32>",
    ["getForwardFlops", "getSavedForBackward"]>;

def Orrery_LRNOp : Orrery_GraphOp<"lrn", "LRN",
    "local response normalization across channels",
    "2·size + 4 FLOP per element forward, as many backward. Keeps the input.",
    1, 1, 1, 1,
    "%y = orrery.lrn(%x) {size = 5 : i64} : (tensor<1x96x55x55xf32>) -> tensor<1x96x55x55xf32>",
    ["getForwardFlops", "getSavedForBackward"]>;

def Orrery_SoftmaxOp : Orrery_GraphOp<"softmax", "Softmax",
    "softmax along one axis",
    "5 FLOP per element forward (max, subtract, exp, sum, divide), as many "
    "backward. Keeps the output.",
    1, 1, 1, 1,
    "%p = orrery.softmax(%s) {axis = -1 : i64} : (tensor<8x12x128x128xf32>) -> tensor<8x12x128x128xf32>",
    ["getForwardFlops", "getSavedForBackward"]>;

def Orrery_LogSoftmaxOp : Orrery_GraphOp<"log_softmax", "LogSoftmax",
    "log-softmax along one axis",
    "5 FLOP per element forward, as many backward. Keeps the output.",
    1, 1, 1, 1,
    "%p = orrery.log_softmax(%s) {axis = -1 : i64} : (tensor<8x1000xf32>) -> tensor<8x1000xf32>",
    ["getForwardFlops", "getSavedForBackward"]>;

def Orrery_DropoutOp : Orrery_GraphOp<"dropout", "Dropout",
    "dropout (active in training)",
    "1 FLOP per element forward and backward. Keeps a one-byte mask per "
    "element, as training frameworks do.",
    1, 3, 1, 2,
    "%y = orrery.dropout(%x) : (tensor<8x128x768xf32>) -> tensor<8x128x768xf32>",
    ["getForwardFlops", "getExtraSavedBytes"]>;

//===----------------------------------------------------------------------===//
// Data movement: no FLOPs, only bytes.
//===----------------------------------------------------------------------===//

class Orrery_MoveOp<string mnemonic, string onnxName, string summaryText,
                    int minIn, int maxIn, int minOut, int maxOut, string example>
    : Orrery_GraphOp<mnemonic, onnxName, summaryText,
        "no FLOPs; the bytes of its operands and results. Keeps nothing. "
        # "Follows a split of its input or splits by batch (a spatial split "
        # "does not survive a reshape); an embedding lookup may split its "
        # "table by vocabulary.",
        minIn, maxIn, minOut, maxOut, example, ["getSplitOptions"], [], "",
        "unsigned $cppClass::getSplitOptions() { return ::orrery::detail::"
        # "moveSplitOptions(getOperation()); }\n">;

def Orrery_ReshapeOp : Orrery_MoveOp<"reshape", "Reshape", "reshape", 1, 2, 1, 1,
    "%y = orrery.reshape(%x, %shape) : (tensor<8x128x768xf32>, tensor<4xi64>) -> tensor<8x128x12x64xf32>">;
def Orrery_TransposeOp : Orrery_MoveOp<"transpose", "Transpose", "axis permutation", 1, 1, 1, 1,
    "%y = orrery.transpose(%x) {perm = array<i64: 0, 2, 1, 3>} : (tensor<8x128x12x64xf32>) -> tensor<8x12x128x64xf32>">;
def Orrery_ConcatOp : Orrery_MoveOp<"concat", "Concat", "concatenation along an axis", 1, -1, 1, 1,
    "%y = orrery.concat(%a, %b) {axis = 1 : i64} : (tensor<1x64x28x28xf32>, tensor<1x32x28x28xf32>) -> tensor<1x96x28x28xf32>">;
def Orrery_SplitOp : Orrery_MoveOp<"split", "Split", "split along an axis", 1, 2, 1, -1,
    "%a, %b = orrery.split(%x) {axis = 1 : i64} : (tensor<1x64xf32>) -> (tensor<1x32xf32>, tensor<1x32xf32>)">;
def Orrery_SliceOp : Orrery_MoveOp<"slice", "Slice", "strided slice", 1, 5, 1, 1,
    "%y = orrery.slice(%x, %starts, %ends) : (tensor<8x16xf32>, tensor<1xi64>, tensor<1xi64>) -> tensor<8x4xf32>">;
def Orrery_GatherOp : Orrery_MoveOp<"gather", "Gather", "gather along an axis (embedding lookup)", 2, 2, 1, 1,
    "%e = orrery.gather(%table, %ids) : (tensor<50257x768xf32>, tensor<8x1024xi64>) -> tensor<8x1024x768xf32>">;
def Orrery_GatherElementsOp : Orrery_MoveOp<"gather_elements", "GatherElements", "gather by index tensor", 2, 2, 1, 1,
    "%y = orrery.gather_elements(%x, %i) : (tensor<4x8xf32>, tensor<4x2xi64>) -> tensor<4x2xf32>">;
def Orrery_SqueezeOp : Orrery_MoveOp<"squeeze", "Squeeze", "remove unit axes", 1, 2, 1, 1,
    "%y = orrery.squeeze(%x, %axes) : (tensor<1x8xf32>, tensor<1xi64>) -> tensor<8xf32>">;
def Orrery_UnsqueezeOp : Orrery_MoveOp<"unsqueeze", "Unsqueeze", "insert unit axes", 1, 2, 1, 1,
    "%y = orrery.unsqueeze(%x, %axes) : (tensor<8xf32>, tensor<1xi64>) -> tensor<1x8xf32>">;
def Orrery_ExpandOp : Orrery_MoveOp<"expand", "Expand", "broadcast to a shape", 2, 2, 1, 1,
    "%y = orrery.expand(%x, %shape) : (tensor<1x1x768xf32>, tensor<3xi64>) -> tensor<8x1x768xf32>">;
def Orrery_FlattenOp : Orrery_MoveOp<"flatten", "Flatten", "flatten to 2-d", 1, 1, 1, 1,
    "%y = orrery.flatten(%x) {axis = 1 : i64} : (tensor<8x2048x1x1xf32>) -> tensor<8x2048xf32>">;
def Orrery_TileOp : Orrery_MoveOp<"tile", "Tile", "repeat along axes", 2, 2, 1, 1,
    "%y = orrery.tile(%x, %r) : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<4x3xf32>">;
def Orrery_PadOp : Orrery_MoveOp<"pad", "Pad", "pad with a constant, edge or reflection", 1, 4, 1, 1,
    "%y = orrery.pad(%x, %pads) : (tensor<1x3x8x8xf32>, tensor<8xi64>) -> tensor<1x3x10x10xf32>">;
def Orrery_ShapeOp : Orrery_MoveOp<"shape", "Shape", "the shape of a tensor", 1, 1, 1, 1,
    "%s = orrery.shape(%x) : (tensor<8x128xf32>) -> tensor<2xi64>">;
def Orrery_SizeOp : Orrery_MoveOp<"size", "Size", "the element count of a tensor", 1, 1, 1, 1,
    "%s = orrery.size(%x) : (tensor<8x128xf32>) -> tensor<i64>">;
def Orrery_RangeOp : Orrery_MoveOp<"range", "Range", "an arithmetic sequence", 3, 3, 1, 1,
    "%r = orrery.range(%a, %b, %d) : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<128xi64>">;
def Orrery_TriluOp : Orrery_MoveOp<"trilu", "Trilu", "upper or lower triangle", 1, 2, 1, 1,
    "%m = orrery.trilu(%x) {upper = 1 : i64} : (tensor<128x128xf32>) -> tensor<128x128xf32>">;
def Orrery_ConstantOfShapeOp : Orrery_MoveOp<"constant_of_shape", "ConstantOfShape", "a tensor filled with one value", 1, 1, 1, 1,
    "%z = orrery.constant_of_shape(%s) : (tensor<2xi64>) -> tensor<128x128xf32>">;

def Orrery_ResizeOp : Orrery_GraphOp<"resize", "Resize",
    "resize by nearest, linear or cubic interpolation",
    "per output element: 1 FLOP (nearest), 4·rank (linear), 16·rank (cubic) "
    "forward; as many backward. Keeps nothing.",
    1, 4, 1, 1,
    "%y = orrery.resize(%x, %roi, %scales) {mode = \"nearest\"} : (tensor<1x64x20x20xf32>, none, tensor<4xf32>) -> tensor<1x64x40x40xf32>",
    ["getForwardFlops"]>;

//===----------------------------------------------------------------------===//
// Reductions and pooling.
//===----------------------------------------------------------------------===//

class Orrery_ReduceOp<string mnemonic, string onnxName, bit savesInput>
    : Orrery_GraphOp<mnemonic, onnxName, "reduction " # onnxName,
        "1 FLOP per input element forward and backward. "
        # !if(savesInput, "Keeps the input.", "Keeps nothing."),
        1, 2, 1, 1,
        "%m = orrery." # mnemonic # "(%x) {axes = array<i64: -1>, keepdims = 1 : i64} : (tensor<8x768xf32>) -> tensor<8x1xf32>",
        ["getForwardFlops", "getSavedForBackward", "getSplitOptions"], [], "",
        "unsigned $cppClass::getSplitOptions() { return ::orrery::detail::"
        # "reduceSplitOptions(getOperation()); }\n"
        # "int64_t $cppClass::getForwardFlops() { return ::orrery::detail::"
        # "inputElementFlops(getOperation()); }\n"
        # "void $cppClass::getSavedForBackward(::llvm::SmallVectorImpl<::mlir::Value> &saved) { "
        # !if(savesInput, "::orrery::detail::saveFirstOperand(getOperation(), saved); ", "")
        # "}\n">;

def Orrery_ReduceMeanOp : Orrery_ReduceOp<"reduce_mean", "ReduceMean", 0>;
def Orrery_ReduceSumOp : Orrery_ReduceOp<"reduce_sum", "ReduceSum", 0>;
def Orrery_ReduceMaxOp : Orrery_ReduceOp<"reduce_max", "ReduceMax", 1>;
def Orrery_ReduceMinOp : Orrery_ReduceOp<"reduce_min", "ReduceMin", 1>;
def Orrery_ReduceProdOp : Orrery_ReduceOp<"reduce_prod", "ReduceProd", 1>;
def Orrery_ReduceL2Op : Orrery_ReduceOp<"reduce_l2", "ReduceL2", 1>;
def Orrery_ReduceSumSquareOp : Orrery_ReduceOp<"reduce_sum_square", "ReduceSumSquare", 1>;
def Orrery_ReduceLogSumExpOp : Orrery_ReduceOp<"reduce_log_sum_exp", "ReduceLogSumExp", 1>;
def Orrery_ArgMaxOp : Orrery_ReduceOp<"arg_max", "ArgMax", 0>;
def Orrery_ArgMinOp : Orrery_ReduceOp<"arg_min", "ArgMin", 0>;

class Orrery_PoolOp<string mnemonic, string onnxName, bit global, bit savesInput>
    : Orrery_GraphOp<mnemonic, onnxName, onnxName # " pooling",
        !if(global, "1 FLOP per input element", "∏kernel FLOP per output element")
        # " forward and backward. " # !if(savesInput, "Keeps the input.", "Keeps nothing."),
        1, 1, 1, 2,
        "%y = orrery." # mnemonic # "(%x) " # !if(global, "", "{kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>} ")
        # ": (tensor<1x64x56x56xf32>) -> tensor<1x64x" # !if(global, "1x1", "28x28") # "xf32>",
        ["getForwardFlops", "getSavedForBackward", "getSplitOptions",
         "getHaloBytes"], [], "",
        "unsigned $cppClass::getSplitOptions() { return ::orrery::detail::"
        # "poolSplitOptions(getOperation(), " # !if(global, "true", "false") # "); }\n"
        # "int64_t $cppClass::getHaloBytes() { return "
        # !if(global, "0", "::orrery::detail::kernelHaloBytes(getOperation())") # "; }\n"
        # "int64_t $cppClass::getForwardFlops() { return ::orrery::detail::"
        # !if(global, "inputElementFlops(getOperation())", "poolFlops(getOperation())") # "; }\n"
        # "void $cppClass::getSavedForBackward(::llvm::SmallVectorImpl<::mlir::Value> &saved) { "
        # !if(savesInput, "::orrery::detail::saveFirstOperand(getOperation(), saved); ", "")
        # "}\n">;

def Orrery_MaxPoolOp : Orrery_PoolOp<"max_pool", "MaxPool", 0, 1>;
def Orrery_AveragePoolOp : Orrery_PoolOp<"average_pool", "AveragePool", 0, 0>;
def Orrery_GlobalAveragePoolOp : Orrery_PoolOp<"global_average_pool", "GlobalAveragePool", 1, 0>;
def Orrery_GlobalMaxPoolOp : Orrery_PoolOp<"global_max_pool", "GlobalMaxPool", 1, 1>;

//===----------------------------------------------------------------------===//
// Recurrent layers.
//===----------------------------------------------------------------------===//

class Orrery_RecurrentOp<string mnemonic, string onnxName, int gates>
    : Orrery_GraphOp<mnemonic, onnxName, onnxName # " recurrent layer",
        "per time step, direction and batch row: " # !cast<string>(gates)
        # "·2·H·(I + H) FLOP for the gate projections plus "
        # !cast<string>(gates) # "·4·H elementwise; backward twice the projections. "
        # "Keeps the input and the " # !cast<string>(gates) # " gate activations of every step.",
        3, 8, 0, 3,
        "%y, %h = orrery." # mnemonic # "(%x, %w, %r) {hidden_size = 128 : i64} : (tensor<16x1x64xf32>, tensor<1x" # !cast<string>(!mul(gates, 128)) # "x64xf32>, tensor<1x" # !cast<string>(!mul(gates, 128)) # "x128xf32>) -> (tensor<16x1x1x128xf32>, tensor<1x1x128xf32>)",
        ["getForwardFlops", "getBackwardFlops", "getSavedForBackward", "getExtraSavedBytes"], [], "",
        "int64_t $cppClass::getForwardFlops() { return ::orrery::detail::recurrentFlops(getOperation(), "
        # !cast<string>(gates) # ", false); }\n"
        # "int64_t $cppClass::getBackwardFlops() { return ::orrery::detail::recurrentFlops(getOperation(), "
        # !cast<string>(gates) # ", true); }\n"
        # "void $cppClass::getSavedForBackward(::llvm::SmallVectorImpl<::mlir::Value> &saved) { "
        # "::orrery::detail::saveFirstOperand(getOperation(), saved); }\n"
        # "int64_t $cppClass::getExtraSavedBytes() { return ::orrery::detail::recurrentGateBytes(getOperation(), "
        # !cast<string>(gates) # "); }\n">;

def Orrery_LSTMOp : Orrery_RecurrentOp<"lstm", "LSTM", 4>;
def Orrery_GRUOp : Orrery_RecurrentOp<"gru", "GRU", 3>;
def Orrery_RNNOp : Orrery_RecurrentOp<"rnn", "RNN", 1>;

//===----------------------------------------------------------------------===//
// Values without computation: weights, constants, absent inputs.
//===----------------------------------------------------------------------===//

def Orrery_WeightOp : Orrery_Op<"weight", ["getParameterCount", "getBytesWritten"], [Pure]> {
  let summary = "a named weight: shape and element type, never bytes";
  let description = [{
    A model weight (an ONNX initializer, or the output of a `ConstantOfShape`
    fed directly by an initializer, as in ONNX's "light" test models). It
    holds no data. `trainable` weights are parameters; the others are buffers
    such as BatchNormalization's running mean and variance.

    Cost: no FLOPs and no bytes moved by itself; its parameter count is its
    element count when trainable, else 0.

    ```mlir
    %w = orrery.weight "encoder.layers.0.linear1.weight" trainable : tensor<3072x768xf32>
    %m = orrery.weight "bn1.running_mean" : tensor<64xf32>
    ```
  }];
  let arguments = (ins StrAttr:$name, UnitAttr:$trainable);
  let results = (outs AnyRankedTensor:$output);
  let assemblyFormat = "$name (`trainable` $trainable^)? attr-dict `:` type($output)";
}

def Orrery_ConstantOp : Orrery_Op<"constant", ["getBytesWritten"], [Pure, ConstantLike,
    AllTypesMatch<["value", "output"]>]> {
  let summary = "a small constant with its values";
  let description = [{
    A constant small enough to matter to shapes (a Reshape target, an axis
    list, a scalar such as LayerNorm's epsilon) or a folded result of an
    exporter's shape subgraph. Larger float tensors are weights instead.

    Cost: none.

    ```mlir
    %s = orrery.constant dense<[8, 128, 12, 64]> : tensor<4xi64>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs AnyRankedTensor:$output);
  let assemblyFormat = "$value attr-dict";
  let hasFolder = 1;
}

def Orrery_NoneOp : Orrery_Op<"none", ["getBytesWritten"], [Pure]> {
  let summary = "an absent optional input";
  let description = [{
    Stands for an ONNX optional input left empty in the middle of an
    operand list (Resize's `roi`, say). Cost: none.

    ```mlir
    %n = orrery.none
    ```
  }];
  let results = (outs NoneType:$output);
  let assemblyFormat = "attr-dict";
}

//===----------------------------------------------------------------------===//
// Anything else, and control flow.
//===----------------------------------------------------------------------===//

def Orrery_OnnxOp : Orrery_Op<"onnx_op", ["getForwardFlops", "getBackwardFlops"]> {
  let summary = "any other ONNX operator, kept whole";
  let description = [{
    An ONNX operator the dialect has no op for, of any domain (for example
    `com.microsoft`), with its type, domain, attributes and tensor types.
    Nothing is dropped: the planner still sees its tensors and bytes.

    Cost: FLOPs unknown, reported as 0 and counted by `orrery stats` under
    "ops without a cost formula"; bytes as for every op.

    ```mlir
    %y = orrery.onnx_op "FastGelu" "com.microsoft" (%x) : (tensor<8x3072xf16>) -> tensor<8x3072xf16>
    ```
  }];
  let arguments = (ins StrAttr:$op_type, StrAttr:$domain,
                       Variadic<Orrery_TensorOrNone>:$inputs);
  let results = (outs Variadic<AnyType>:$outputs);
  let assemblyFormat =
      "$op_type $domain `(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs)";
}

def Orrery_YieldOp : Orrery_Op<"yield", [], [Pure, Terminator,
    ParentOneOf<["IfOp", "LoopOp", "ScanOp"]>]> {
  let summary = "the results of a control-flow body";
  let description = [{
    Ends a branch of `orrery.if` or the body of `orrery.loop` /
    `orrery.scan`, giving that body's outputs. Cost: none.

    ```mlir
    orrery.yield %a, %b : tensor<4xf32>, tensor<4xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
}

class Orrery_ControlFlowOp<string mnemonic, string onnxName, string summaryText,
                           string cost, string example>
    : Orrery_Op<mnemonic, ["getForwardFlops", "getBackwardFlops",
                           "getBytesRead", "getBytesWritten", "getSavedForBackward",
                           "getExtraSavedBytes"],
                [RecursiveMemoryEffects]> {
  let summary = summaryText;
  let description = "Imported from ONNX `" # onnxName # "` whose condition "
    # "did not fold to a constant (a constant condition imports the taken "
    # "branch inline). Its bodies are regions that may use values defined "
    # "above.\n\nCost: " # cost # "\n\n```mlir\n" # example # "\n```\n";
  let arguments = (ins Variadic<Orrery_TensorOrNone>:$inputs);
  let results = (outs Variadic<AnyType>:$outputs);
}

def Orrery_IfOp : Orrery_ControlFlowOp<"if", "If", "a two-way branch",
    "the larger of the two branches' costs, term by term.",
    "%r = orrery.if(%cond) : (tensor<i1>) -> tensor<4xf32> {\n  orrery.yield %a : tensor<4xf32>\n} else {\n  orrery.yield %b : tensor<4xf32>\n}"> {
  let regions = (region SizedRegion<1>:$thenRegion, SizedRegion<1>:$elseRegion);
  let assemblyFormat = "`(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs) $thenRegion `else` $elseRegion";
}

def Orrery_LoopOp : Orrery_ControlFlowOp<"loop", "Loop", "a counted or conditional loop",
    "the body's cost times the trip count when the trip count is a constant; "
    "otherwise unknown (0, and `orrery stats` lists it).",
    "%r = orrery.loop(%n, %c, %x) : (tensor<i64>, tensor<i1>, tensor<4xf32>) -> tensor<4xf32> {\n^bb0(%i: tensor<i64>, %ci: tensor<i1>, %v: tensor<4xf32>):\n  orrery.yield %ci, %v : tensor<i1>, tensor<4xf32>\n}"> {
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "`(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs) $body";
}

def Orrery_ScanOp : Orrery_ControlFlowOp<"scan", "Scan", "a scan over a sequence axis",
    "the body's cost times the length of the scanned axis of the first scan input.",
    "%s, %ys = orrery.scan(%s0, %xs) {num_scan_inputs = 1 : i64} : (tensor<4xf32>, tensor<16x4xf32>) -> (tensor<4xf32>, tensor<16x4xf32>) {\n^bb0(%s: tensor<4xf32>, %x: tensor<4xf32>):\n  orrery.yield %s, %x : tensor<4xf32>, tensor<4xf32>\n}"> {
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "`(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs) $body";
}

include "orrery/Dialect/OrreryFusedOps.td"

#endif // ORRERY_DIALECT_ORRERYOPS_TD
