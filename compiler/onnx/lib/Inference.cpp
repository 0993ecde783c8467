//===- Inference.cpp - ONNX shape rules and shape-subgraph folding --------===//
//
// ONNX 1.12's own shape inference stops at opset 17 and cannot see through
// an exporter's Shape → Gather → Concat → Reshape chains. These rules cover
// the operators of the orrery dialect at every opset from 7 to 21 (attribute
// forms before an opset moved them to inputs, input forms after), and fold
// small integer computations so that such chains give static shapes.
//
//===----------------------------------------------------------------------===//

#include "Inference.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

namespace orrery::onnx::detail {

std::string describe(const NodeDesc &node) {
  return "node '" + node.name + "' (" + node.opType + ")";
}

const AttrDesc *findAttr(const NodeDesc &node, const std::string &name) {
  for (const AttrDesc &a : node.attrs)
    if (a.name == name)
      return &a;
  return nullptr;
}

int64_t attrInt(const NodeDesc &node, const std::string &name, int64_t dflt) {
  const AttrDesc *a = findAttr(node, name);
  return a ? a->i : dflt;
}

double attrFloat(const NodeDesc &node, const std::string &name, double dflt) {
  const AttrDesc *a = findAttr(node, name);
  return a ? a->f : dflt;
}

std::string attrString(const NodeDesc &node, const std::string &name,
                       const std::string &dflt) {
  const AttrDesc *a = findAttr(node, name);
  return a ? a->s : dflt;
}

std::vector<int64_t> attrInts(const NodeDesc &node, const std::string &name) {
  const AttrDesc *a = findAttr(node, name);
  return a ? a->ints : std::vector<int64_t>{};
}

namespace {

using Shape = std::vector<int64_t>;

[[noreturn]] void fail(const NodeDesc &node, const std::string &what) {
  throw LoadError(describe(node) + ": " + what);
}

// Shape arithmetic on a file's attributes and dims is checked: an overflow
// is the node's error, never a wrapped (negative or small) dimension.
template <typename Op>
int64_t checked(const NodeDesc &node, int64_t a, int64_t b, const char *sym,
                Op overflows) {
  int64_t r;
  if (overflows(a, b, &r))
    fail(node, "shape arithmetic overflows int64 (" + std::to_string(a) + sym +
                   std::to_string(b) + ")");
  return r;
}
int64_t add(const NodeDesc &node, int64_t a, int64_t b) {
  return checked(node, a, b, " + ", [](int64_t x, int64_t y, int64_t *r) {
    return __builtin_add_overflow(x, y, r);
  });
}
int64_t sub(const NodeDesc &node, int64_t a, int64_t b) {
  return checked(node, a, b, " - ", [](int64_t x, int64_t y, int64_t *r) {
    return __builtin_sub_overflow(x, y, r);
  });
}
int64_t mul(const NodeDesc &node, int64_t a, int64_t b) {
  return checked(node, a, b, " x ", [](int64_t x, int64_t y, int64_t *r) {
    return __builtin_mul_overflow(x, y, r);
  });
}

// An attribute with one value per spatial dim (strides, dilations, kernel
// shape) or two (pads): empty means the default, any other length is wrong.
std::vector<int64_t> perDim(const NodeDesc &node, const char *name,
                            size_t count, int64_t dflt, int64_t least) {
  std::vector<int64_t> v = attrInts(node, name);
  if (v.empty())
    return std::vector<int64_t>(count, dflt);
  if (v.size() != count)
    fail(node, std::string(name) + " has " + std::to_string(v.size()) +
                   " values, expected " + std::to_string(count));
  for (int64_t x : v)
    if (x < least)
      fail(node, std::string(name) + " value " + std::to_string(x) +
                     " below " + std::to_string(least));
  return v;
}

std::string shapeStr(const Shape &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? "x" : "") + std::to_string(s[i]);
  return r + "]";
}

// Saturates instead of overflowing: shapes come from untrusted files.
int64_t product(const Shape &s) {
  int64_t p = 1;
  for (int64_t d : s) {
    if (d < 0)
      return -1;
    if (d > 0 && p > std::numeric_limits<int64_t>::max() / d)
      return std::numeric_limits<int64_t>::max();
    p *= d;
  }
  return p;
}

int64_t toInt(double v) { return saturatingInt64(v); }

bool isFloatType(ElemType t) { return isFloatElemType(t); }

struct Ctx {
  const NodeDesc &node;
  int64_t opset;
  const std::vector<const ValueDesc *> &in;
  std::vector<ValueDesc> &out;

  size_t numIn() const { return in.size(); }
  bool has(size_t i) const { return i < in.size() && in[i]; }
  const ValueDesc &input(size_t i) const {
    if (!has(i))
      fail(node, "missing required input " + std::to_string(i));
    return *in[i];
  }
  const Shape &shape(size_t i) const { return input(i).shape; }
  bool isConst(size_t i) const {
    return has(i) && in[i]->kind == ValueKind::Constant &&
           (int64_t)in[i]->values.size() == in[i]->numElements();
  }
  [[noreturn]] void notConstant(size_t i, const char *what) const {
    throw NotConstantError(describe(node) + ": cannot infer shapes: its " +
                           what + " input '" + (has(i) ? in[i]->name : "") +
                           "' is not a constant");
  }
  std::vector<int64_t> ints(size_t i, const char *what) const {
    if (!isConst(i))
      notConstant(i, what);
    std::vector<int64_t> r;
    for (double v : in[i]->values)
      r.push_back(toInt(v));
    return r;
  }
  /// The one value of scalar input `i` (a constant of one element).
  double scalar(size_t i, const char *what) const {
    // Range's length is in these values: without them it is data-dependent.
    if (!isConst(i))
      fail(node, std::string("cannot infer shapes: its ") + what + " input '" +
                     (has(i) ? in[i]->name : "") + "' is not a constant scalar");
    if (in[i]->values.size() != 1)
      fail(node, std::string("its ") + what + " input '" + in[i]->name +
                     "' holds " + std::to_string(in[i]->values.size()) +
                     " values, not one");
    return in[i]->values[0];
  }
  int64_t axis(int64_t a, int64_t rank) const {
    if (a < -rank || a >= rank)
      fail(node, "axis " + std::to_string(a) + " out of range for rank " +
                     std::to_string(rank));
    return a < 0 ? a + rank : a;
  }
  ValueDesc &result(size_t i, ElemType type, Shape shape) {
    if (out.size() <= i)
      out.resize(i + 1);
    out[i].type = type;
    out[i].shape = std::move(shape);
    int64_t elements = 1;
    for (int64_t d : out[i].shape) {
      if (d < 0)
        fail(node,
             "inferred a negative dimension in " + shapeStr(out[i].shape));
      if (d > 0 && elements > kMaxTensorElements / d)
        fail(node, "inferred a tensor of more than 2^50 elements");
      elements *= d;
    }
    return out[i];
  }
  ValueDesc &same(size_t i = 0) {
    return result(i, input(0).type, input(0).shape);
  }
  void setValues(size_t i, std::vector<double> values) {
    out[i].kind = ValueKind::Constant;
    out[i].values = std::move(values);
  }
  bool allConst() const {
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i] && !isConst(i))
        return false;
    return true;
  }
};

Shape broadcast(const Ctx &c) {
  Shape r;
  for (size_t k = 0; k < c.numIn(); ++k) {
    if (!c.has(k))
      continue;
    const Shape &s = c.shape(k);
    if (s.size() > r.size())
      r.insert(r.begin(), s.size() - r.size(), 1);
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t &d = r[r.size() - s.size() + i];
      if (d == 1)
        d = s[i];
      else if (s[i] != 1 && s[i] != d)
        fail(c.node, "input shapes do not broadcast: " + shapeStr(r) + " and " +
                         shapeStr(s));
    }
  }
  return r;
}

// Index of the broadcast source element for a flat output index.
size_t broadcastIndex(const Shape &out, const Shape &src, int64_t flat) {
  size_t idx = 0, stride = 1;
  for (int64_t i = (int64_t)out.size() - 1, j = (int64_t)src.size() - 1; j >= 0;
       --i, --j) {
    int64_t coord = flat % out[i];
    flat /= out[i];
    if (src[j] != 1)
      idx += coord * stride;
    stride *= src[j];
  }
  return idx;
}

// Folds an op whose output element at multi-index `out` is the input
// element at `mapIndex(out)` (Slice, Transpose, Concat of constants).
std::vector<double>
gatherFold(const Shape &outShape, const ValueDesc &in,
           const std::function<Shape(const Shape &)> &mapIndex) {
  std::vector<double> vals(product(outShape));
  Shape idx(outShape.size(), 0);
  for (int64_t e = 0; e < (int64_t)vals.size(); ++e) {
    int64_t rem = e;
    for (int64_t d = (int64_t)outShape.size() - 1; d >= 0; --d) {
      idx[d] = rem % outShape[d];
      rem /= outShape[d];
    }
    Shape src = mapIndex(idx);
    int64_t flat = 0;
    for (size_t d = 0; d < src.size(); ++d)
      flat = flat * in.shape[d] + src[d];
    vals[e] = in.values[flat];
  }
  return vals;
}

void foldBroadcast(
    Ctx &c, const std::function<double(const std::vector<double> &)> &f) {
  if (!c.allConst() || c.out[0].numElements() > kMaxFoldElements)
    return;
  const Shape &os = c.out[0].shape;
  std::vector<double> vals(product(os));
  std::vector<double> args(c.numIn());
  for (int64_t e = 0; e < (int64_t)vals.size(); ++e) {
    for (size_t k = 0; k < c.numIn(); ++k)
      args[k] = c.in[k]->values[broadcastIndex(os, c.in[k]->shape, e)];
    vals[e] = f(args);
  }
  bool isInt = !isFloatType(c.out[0].type);
  if (isInt)
    for (double &v : vals)
      v = std::trunc(v);
  c.setValues(0, std::move(vals));
}

// Output spatial size of a convolution or pooling window (ONNX Conv/MaxPool).
Shape windowedShape(Ctx &c, const Shape &x, const Shape &kernel,
                    int64_t channels, bool ceilMode) {
  const NodeDesc &n = c.node;
  size_t spatial = x.size() - 2;
  Shape strides = perDim(n, "strides", spatial, 1, 1),
        dil = perDim(n, "dilations", spatial, 1, 1),
        pads = perDim(n, "pads", 2 * spatial, 0, 0);
  if (kernel.size() != spatial)
    fail(n, "kernel has " + std::to_string(kernel.size()) +
                " dims for " + std::to_string(spatial) + " spatial dims");
  std::string autoPad = attrString(n, "auto_pad", "NOTSET");
  Shape r = {x[0], channels};
  for (size_t i = 0; i < spatial; ++i) {
    if (kernel[i] < 1)
      fail(n, "kernel dim " + std::to_string(kernel[i]) + " below 1");
    int64_t eff = add(n, mul(n, kernel[i] - 1, dil[i]), 1);
    int64_t o;
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER")
      o = add(n, x[i + 2], strides[i] - 1) / strides[i];
    else if (autoPad == "VALID")
      o = (x[i + 2] - eff) / strides[i] + 1;
    else {
      int64_t span =
          sub(n, add(n, add(n, x[i + 2], pads[i]), pads[i + spatial]), eff);
      o = (ceilMode ? add(n, span, strides[i] - 1) / strides[i]
                    : span / strides[i]) +
          1;
    }
    if (o <= 0)
      fail(c.node, "window larger than the padded input " + shapeStr(x));
    r.push_back(o);
  }
  return r;
}

// Reductions take axes as an attribute before `inputOpset` (ReduceSum: 13,
// the others: 18) and as an optional input from it on.
std::vector<int64_t> reduceAxes(Ctx &c, int64_t inputOpset) {
  if (c.opset >= inputOpset)
    return c.has(1) ? c.ints(1, "axes") : std::vector<int64_t>{};
  return attrInts(c.node, "axes");
}

using Rule = std::function<void(Ctx &)>;

/// Every shape rule, by op type. Built once: rules() holds it in a
/// function-local static, whose initialisation C++ makes thread-safe (the
/// library's loads of different models may run in parallel).
static std::map<std::string, Rule> buildRules() {
  std::map<std::string, Rule> r;
  // Elementwise ops that keep shape and type.
  for (const char *op : {"Abs",
                         "Neg",
                         "Relu",
                         "LeakyRelu",
                         "Elu",
                         "Selu",
                         "Sigmoid",
                         "HardSigmoid",
                         "HardSwish",
                         "Tanh",
                         "Erf",
                         "Gelu",
                         "Softplus",
                         "Exp",
                         "Log",
                         "Sqrt",
                         "Reciprocal",
                         "Sin",
                         "Cos",
                         "Floor",
                         "Ceil",
                         "Round",
                         "Sign",
                         "Not",
                         "Identity",
                         "Clip",
                         "Softmax",
                         "LogSoftmax",
                         "LRN",
                         "InstanceNormalization",
                         "CumSum",
                         "Trilu",
                         "Mish",
                         "Softsign",
                         "ThresholdedRelu",
                         "Celu",
                         "Shrink",
                         "Erf",
                         "IsNaN",
                         "IsInf",
                         "Asin",
                         "Acos",
                         "Atan",
                         "Sinh",
                         "Cosh",
                         "Tan",
                         "Acosh",
                         "Asinh",
                         "Atanh",
                         "Hardmax",
                         "LpNormalization",
                         "MeanVarianceNormalization",
                         "ReverseSequence",
                         "Bernoulli"})
    r[op] = [op = std::string(op)](Ctx &c) {
      c.same();
      if (op == "IsNaN" || op == "IsInf")
        c.out[0].type = ElemType::Bool;
      if (!c.isConst(0) || c.out[0].numElements() > kMaxFoldElements)
        return;
      std::vector<double> v = c.in[0]->values;
      bool known = true;
      for (double &x : v) {
        if (op == "Neg")
          x = -x;
        else if (op == "Abs")
          x = std::fabs(x);
        else if (op == "Sqrt")
          x = std::sqrt(x);
        else if (op == "Floor")
          x = std::floor(x);
        else if (op == "Ceil")
          x = std::ceil(x);
        else if (op == "Not")
          x = x == 0;
        else if (op == "Identity") {
        } else if (op == "Relu")
          x = std::max(0.0, x);
        else if (op == "Reciprocal")
          x = 1.0 / x;
        else
          known = false;
      }
      if (known)
        c.setValues(0, std::move(v));
    };
  r["Cast"] = [](Ctx &c) {
    int64_t to = attrInt(c.node, "to", 1);
    ElemType type = elemTypeFromOnnx(to >= 0 && to <= INT32_MAX ? int32_t(to) : -1);
    if (type == ElemType::Undefined || type == ElemType::String ||
        type == ElemType::Complex64 || type == ElemType::Complex128)
      throw LoadError(describe(c.node) + ": cannot cast to element type " +
                      std::to_string(to));
    c.same().type = type;
    if (c.isConst(0) && c.out[0].numElements() <= kMaxFoldElements) {
      std::vector<double> v = c.in[0]->values;
      if (!isFloatType(c.out[0].type))
        for (double &x : v)
          x = c.out[0].type == ElemType::Bool ? (x != 0) : std::trunc(x);
      c.setValues(0, std::move(v));
    }
  };
  r["CastLike"] = [](Ctx &c) { c.same().type = c.input(1).type; };
  // Broadcasting ops.
  auto arith = [](std::function<double(const std::vector<double> &)> f,
                  bool boolean) {
    return [f, boolean](Ctx &c) {
      ElemType t = boolean ? ElemType::Bool : c.input(0).type;
      c.result(0, t, broadcast(c));
      foldBroadcast(c, f);
    };
  };
  r["Add"] = arith([](auto &a) { return a[0] + a[1]; }, false);
  r["Sub"] = arith([](auto &a) { return a[0] - a[1]; }, false);
  r["Mul"] = arith([](auto &a) { return a[0] * a[1]; }, false);
  r["Div"] = [](Ctx &c) {
    bool isInt = !isFloatType(c.input(0).type);
    c.result(0, c.input(0).type, broadcast(c));
    foldBroadcast(c, [isInt](auto &a) {
      if (!isInt)
        return a[0] / a[1];
      if (a[1] == 0)
        return 0.0;
      return std::trunc(a[0] / a[1]);
    });
  };
  r["Pow"] = arith([](auto &a) { return std::pow(a[0], a[1]); }, false);
  r["Mod"] = arith(
      [](auto &a) { return a[1] == 0 ? 0 : std::fmod(a[0], a[1]); }, false);
  r["Max"] = arith(
      [](auto &a) { return *std::max_element(a.begin(), a.end()); }, false);
  r["Min"] = arith(
      [](auto &a) { return *std::min_element(a.begin(), a.end()); }, false);
  r["Sum"] = arith(
      [](auto &a) { return std::accumulate(a.begin(), a.end(), 0.0); }, false);
  r["Mean"] = arith(
      [](auto &a) {
        return std::accumulate(a.begin(), a.end(), 0.0) / a.size();
      },
      false);
  r["PRelu"] =
      arith([](auto &a) { return a[0] < 0 ? a[0] * a[1] : a[0]; }, false);
  r["Equal"] = arith([](auto &a) { return double(a[0] == a[1]); }, true);
  r["Less"] = arith([](auto &a) { return double(a[0] < a[1]); }, true);
  r["LessOrEqual"] = arith([](auto &a) { return double(a[0] <= a[1]); }, true);
  r["Greater"] = arith([](auto &a) { return double(a[0] > a[1]); }, true);
  r["GreaterOrEqual"] =
      arith([](auto &a) { return double(a[0] >= a[1]); }, true);
  r["And"] = arith([](auto &a) { return double(a[0] && a[1]); }, true);
  r["Or"] = arith([](auto &a) { return double(a[0] || a[1]); }, true);
  r["Xor"] =
      arith([](auto &a) { return double((a[0] != 0) != (a[1] != 0)); }, true);
  r["Where"] = [](Ctx &c) {
    c.result(0, c.input(1).type, broadcast(c));
    foldBroadcast(c, [](auto &a) { return a[0] ? a[1] : a[2]; });
  };
  r["Dropout"] = [](Ctx &c) {
    c.same();
    if (c.node.outputs.size() > 1)
      c.result(1, ElemType::Bool, c.shape(0));
  };
  // Contractions.
  r["MatMul"] = [](Ctx &c) {
    Shape a = c.shape(0), b = c.shape(1);
    if (a.empty() || b.empty())
      fail(c.node, "MatMul of a scalar");
    bool va = a.size() == 1, vb = b.size() == 1;
    if (va)
      a.insert(a.begin(), 1);
    if (vb)
      b.push_back(1);
    if (a.back() != b[b.size() - 2])
      fail(c.node, "contraction dimensions differ: " + shapeStr(c.shape(0)) +
                       " x " + shapeStr(c.shape(1)));
    Shape ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
    Shape batch;
    {
      size_t n = std::max(ba.size(), bb.size());
      ba.insert(ba.begin(), n - ba.size(), 1);
      bb.insert(bb.begin(), n - bb.size(), 1);
      for (size_t i = 0; i < n; ++i) {
        if (ba[i] != bb[i] && ba[i] != 1 && bb[i] != 1)
          fail(c.node, "batch dimensions do not broadcast");
        batch.push_back(std::max(ba[i], bb[i]));
      }
    }
    if (!va)
      batch.push_back(a[a.size() - 2]);
    if (!vb)
      batch.push_back(b.back());
    c.result(0, c.input(0).type, batch);
  };
  r["Gemm"] = [](Ctx &c) {
    Shape a = c.shape(0), b = c.shape(1);
    if (a.size() != 2 || b.size() != 2)
      fail(c.node, "Gemm operands must be 2-d");
    if (attrInt(c.node, "transA", 0))
      std::swap(a[0], a[1]);
    if (attrInt(c.node, "transB", 0))
      std::swap(b[0], b[1]);
    if (a[1] != b[0])
      fail(c.node, "contraction dimensions differ: " + std::to_string(a[1]) +
                       " vs " + std::to_string(b[0]));
    c.result(0, c.input(0).type, {a[0], b[1]});
  };
  r["Conv"] = [](Ctx &c) {
    const Shape &x = c.shape(0), &w = c.shape(1);
    if (x.size() < 3 || w.size() != x.size())
      fail(c.node, "input " + shapeStr(x) + " and weight " + shapeStr(w) +
                       " ranks differ or are below 3");
    int64_t group = attrInt(c.node, "group", 1);
    if (group <= 0 || x[1] != w[1] * group)
      fail(c.node, "input channels " + std::to_string(x[1]) +
                       " differ from weight channels " + std::to_string(w[1]) +
                       " x group " + std::to_string(group));
    Shape k = attrInts(c.node, "kernel_shape");
    if (k.empty())
      k.assign(w.begin() + 2, w.end());
    c.result(0, x.size() ? c.input(0).type : ElemType::Float,
             windowedShape(c, x, k, w[0], false));
  };
  r["ConvTranspose"] = [](Ctx &c) {
    const Shape &x = c.shape(0), &w = c.shape(1);
    if (x.size() < 3 || w.size() != x.size())
      fail(c.node, "input and weight ranks differ or are below 3");
    const NodeDesc &n = c.node;
    size_t spatial = x.size() - 2;
    int64_t group = attrInt(n, "group", 1);
    if (group <= 0 || x[1] != w[0])
      fail(n, "input channels " + std::to_string(x[1]) +
                  " differ from weight input channels " +
                  std::to_string(w[0]) + " (group " + std::to_string(group) +
                  ")");
    Shape k(w.begin() + 2, w.end());
    if (findAttr(n, "kernel_shape"))
      k = perDim(n, "kernel_shape", spatial, 1, 1);
    Shape s = perDim(n, "strides", spatial, 1, 1),
          d = perDim(n, "dilations", spatial, 1, 1),
          p = perDim(n, "pads", 2 * spatial, 0, 0),
          op = perDim(n, "output_padding", spatial, 0, 0);
    Shape os = attrInts(n, "output_shape");
    if (!os.empty() && os.size() != spatial)
      fail(n, "output_shape has " + std::to_string(os.size()) +
                  " values, expected " + std::to_string(spatial));
    Shape r = {x[0], mul(n, w[1], group)};
    for (size_t i = 0; i < spatial; ++i) {
      if (!os.empty()) {
        r.push_back(os[i]);
        continue;
      }
      int64_t span = add(n, mul(n, s[i], x[i + 2] - 1), op[i]);
      span = add(n, span, add(n, mul(n, k[i] - 1, d[i]), 1));
      r.push_back(sub(n, sub(n, span, p[i]), p[i + spatial]));
    }
    c.result(0, c.input(0).type, r);
  };
  // Normalizations.
  r["BatchNormalization"] = [](Ctx &c) {
    c.same();
    int64_t ch = c.shape(0).size() > 1 ? c.shape(0)[1] : 1;
    for (size_t i = 1; i < c.node.outputs.size(); ++i)
      c.result(i, c.input(0).type, {ch});
  };
  r["LayerNormalization"] = [](Ctx &c) {
    c.same();
    int64_t rank = c.shape(0).size();
    int64_t axis = c.axis(attrInt(c.node, "axis", -1), rank);
    Shape reduced = c.shape(0);
    for (int64_t i = axis; i < rank; ++i)
      reduced[i] = 1;
    for (size_t i = 1; i < c.node.outputs.size(); ++i)
      c.result(i, ElemType::Float, reduced);
  };
  // Data movement.
  r["Reshape"] = [](Ctx &c) {
    const Shape &x = c.shape(0);
    Shape target =
        c.opset >= 5 ? c.ints(1, "shape") : attrInts(c.node, "shape");
    bool allowZero = attrInt(c.node, "allowzero", 0);
    int64_t known = 1, infer = -1;
    for (size_t i = 0; i < target.size(); ++i) {
      if (target[i] == 0 && !allowZero) {
        if (i >= x.size())
          fail(c.node, "0 in shape beyond the input rank");
        target[i] = x[i];
      }
      if (target[i] == -1) {
        if (infer >= 0)
          fail(c.node, "more than one -1 in the target shape");
        infer = i;
      } else if (target[i] < 0) {
        fail(c.node, "negative dimension in the target shape");
      } else {
        known = product({known, target[i]});
      }
    }
    if (infer >= 0) {
      if (known == 0 || product(x) % known)
        fail(c.node,
             "cannot reshape " + shapeStr(x) + " to " + shapeStr(target));
      target[infer] = product(x) / known;
    }
    if (product(target) != product(x))
      fail(c.node, "cannot reshape " + shapeStr(x) + " to " + shapeStr(target));
    c.result(0, c.input(0).type, target);
    if (c.isConst(0))
      c.setValues(0, c.in[0]->values);
  };
  r["Flatten"] = [](Ctx &c) {
    const Shape &x = c.shape(0);
    int64_t axis = attrInt(c.node, "axis", 1);
    if (axis < 0)
      axis += x.size();
    if (axis < 0 || axis > (int64_t)x.size())
      fail(c.node, "axis out of range");
    int64_t a = product(Shape(x.begin(), x.begin() + axis));
    c.result(0, c.input(0).type, {a, product(x) / std::max<int64_t>(a, 1)});
    if (c.isConst(0))
      c.setValues(0, c.in[0]->values);
  };
  r["Transpose"] = [](Ctx &c) {
    const Shape &x = c.shape(0);
    Shape perm = attrInts(c.node, "perm");
    if (perm.empty())
      for (int64_t i = x.size() - 1; i >= 0; --i)
        perm.push_back(i);
    if (perm.size() != x.size())
      fail(c.node, "perm does not match the rank");
    Shape r;
    for (int64_t p : perm)
      r.push_back(x[c.axis(p, x.size())]);
    c.result(0, c.input(0).type, r);
    if (c.isConst(0) && product(r) <= kMaxFoldElements) {
      Shape norm;
      for (int64_t p : perm)
        norm.push_back(c.axis(p, x.size()));
      c.setValues(0, gatherFold(r, *c.in[0], [&](const Shape &o) {
                    Shape src(o.size());
                    for (size_t i = 0; i < o.size(); ++i)
                      src[norm[i]] = o[i];
                    return src;
                  }));
    }
  };
  r["Concat"] = [](Ctx &c) {
    Shape r = c.shape(0);
    int64_t axis = c.axis(attrInt(c.node, "axis", 0), r.size());
    for (size_t i = 1; i < c.numIn(); ++i) {
      const Shape &s = c.shape(i);
      if (s.size() != r.size())
        fail(c.node, "inputs have different ranks");
      for (size_t d = 0; d < s.size(); ++d)
        if ((int64_t)d != axis && s[d] != r[d])
          fail(c.node, "input " + std::to_string(i) + " " + shapeStr(s) +
                           " differs from " + shapeStr(c.shape(0)) +
                           " off the concatenated axis");
      r[axis] = add(c.node, r[axis], s[axis]);
    }
    c.result(0, c.input(0).type, r);
    if (c.allConst() && product(r) <= kMaxFoldElements) {
      // Element o comes from the input whose slice along `axis` holds o[axis].
      std::vector<double> v(product(r));
      Shape idx(r.size());
      for (int64_t e = 0; e < (int64_t)v.size(); ++e) {
        int64_t rem = e;
        for (int64_t d = (int64_t)r.size() - 1; d >= 0; --d) {
          idx[d] = rem % r[d];
          rem /= r[d];
        }
        int64_t along = idx[axis];
        size_t k = 0;
        while (along >= c.shape(k)[axis])
          along -= c.shape(k++)[axis];
        Shape src = idx;
        src[axis] = along;
        int64_t flat = 0;
        for (size_t d = 0; d < src.size(); ++d)
          flat = flat * c.shape(k)[d] + src[d];
        v[e] = c.in[k]->values[flat];
      }
      c.setValues(0, v);
    }
  };
  r["Split"] = [](Ctx &c) {
    const Shape &x = c.shape(0);
    int64_t axis = c.axis(attrInt(c.node, "axis", 0), x.size());
    size_t n = c.node.outputs.size();
    std::vector<int64_t> sizes =
        c.opset >= 13 ? (c.has(1) ? c.ints(1, "split") : std::vector<int64_t>{})
                      : attrInts(c.node, "split");
    if (sizes.empty()) {
      int64_t each = (x[axis] + n - 1) / n;
      for (size_t i = 0; i < n; ++i)
        sizes.push_back(std::min(each, x[axis] - each * (int64_t)i));
    }
    if (sizes.size() != n)
      fail(c.node, "split sizes do not match the outputs");
    int64_t total = 0;
    for (int64_t size : sizes) {
      if (size < 0)
        fail(c.node, "negative split size " + std::to_string(size));
      total = add(c.node, total, size);
    }
    if (total != x[axis])
      fail(c.node, "split sizes add up to " + std::to_string(total) +
                       ", the axis has " + std::to_string(x[axis]));
    for (size_t i = 0; i < n; ++i) {
      Shape s = x;
      s[axis] = sizes[i];
      c.result(i, c.input(0).type, s);
    }
  };
  r["Slice"] = [](Ctx &c) {
    const Shape &x = c.shape(0);
    std::vector<int64_t> starts, ends, axes, steps;
    if (c.opset < 10) {
      starts = attrInts(c.node, "starts");
      ends = attrInts(c.node, "ends");
      axes = attrInts(c.node, "axes");
    } else {
      starts = c.ints(1, "starts");
      ends = c.ints(2, "ends");
      if (c.has(3))
        axes = c.ints(3, "axes");
      if (c.has(4))
        steps = c.ints(4, "steps");
    }
    if (axes.empty())
      for (size_t i = 0; i < starts.size(); ++i)
        axes.push_back(i);
    steps.resize(starts.size(), 1);
    if (ends.size() != starts.size() || axes.size() != starts.size())
      fail(c.node, "starts, ends and axes differ in length");
    Shape r = x;
    std::vector<int64_t> lo(x.size(), 0), st(x.size(), 1);
    for (size_t i = 0; i < starts.size(); ++i) {
      int64_t a = c.axis(axes[i], x.size()), d = x[a], step = steps[i];
      if (step == 0)
        fail(c.node, "step 0");
      auto clampIdx = [&](int64_t v, bool isEnd) {
        if (v < 0)
          v = v + d;
        if (step > 0)
          return std::clamp<int64_t>(v, 0, d);
        return std::clamp<int64_t>(v, -1, d - 1) + (isEnd ? 0 : 0);
      };
      int64_t s = starts[i] < -d && step < 0 ? -1 : clampIdx(starts[i], false);
      int64_t e = ends[i] <= std::numeric_limits<int64_t>::min() / 2
                      ? -1
                      : clampIdx(ends[i], true);
      if (step < 0 && ends[i] < -d)
        e = -1;
      // In 128 bits: a step of INT64_MIN has no 64-bit negation.
      __int128 wide = step > 0 ? (__int128(e) - s + step - 1) / step
                               : (__int128(s) - e - step - 1) / -__int128(step);
      r[a] = wide > 0 ? int64_t(wide) : 0;
      lo[a] = s;
      st[a] = step;
    }
    c.result(0, c.input(0).type, r);
    if (c.isConst(0) && product(r) <= kMaxFoldElements)
      c.setValues(0, gatherFold(r, *c.in[0], [&](const Shape &o) {
                    Shape src(o.size());
                    for (size_t i = 0; i < o.size(); ++i)
                      src[i] = lo[i] + o[i] * st[i];
                    return src;
                  }));
  };
  r["Gather"] = [](Ctx &c) {
    const Shape &x = c.shape(0), &idx = c.shape(1);
    int64_t axis = c.axis(attrInt(c.node, "axis", 0), x.size());
    Shape r(x.begin(), x.begin() + axis);
    r.insert(r.end(), idx.begin(), idx.end());
    r.insert(r.end(), x.begin() + axis + 1, x.end());
    c.result(0, c.input(0).type, r);
    if (c.isConst(0) && c.isConst(1) && x.size() == 1) {
      std::vector<double> v;
      for (double i : c.in[1]->values) {
        int64_t k = toInt(i) < 0 ? toInt(i) + x[0] : toInt(i);
        if (k < 0 || k >= x[0])
          fail(c.node, "index out of range");
        v.push_back(c.in[0]->values[k]);
      }
      c.setValues(0, v);
    }
  };
  r["GatherElements"] = [](Ctx &c) {
    c.result(0, c.input(0).type, c.shape(1));
  };
  r["GatherND"] = [](Ctx &c) {
    // indices.shape[:-1] + data.shape[batch_dims + indices.shape[-1]:].
    const Shape &x = c.shape(0), &idx = c.shape(1);
    int64_t b = attrInt(c.node, "batch_dims", 0);
    if (idx.empty() || b < 0 || b >= (int64_t)idx.size() ||
        b >= (int64_t)x.size())
      fail(c.node, "indices " + shapeStr(idx) + " and batch_dims " +
                       std::to_string(b) + " do not fit data " + shapeStr(x));
    int64_t depth = idx.back();
    if (depth < 1 || b + depth > (int64_t)x.size())
      fail(c.node, "index depth " + std::to_string(depth) +
                       " exceeds the rank of data " + shapeStr(x));
    Shape r(idx.begin(), idx.end() - 1);
    r.insert(r.end(), x.begin() + b + depth, x.end());
    c.result(0, c.input(0).type, r);
    if (b != 0 || !c.isConst(0) || !c.isConst(1) ||
        product(r) > kMaxFoldElements)
      return;
    // Fold: each index tuple picks a slice of `data`.
    int64_t sliceSize = 1;
    for (size_t i = depth; i < x.size(); ++i)
      sliceSize *= x[i];
    std::vector<double> v;
    const std::vector<double> &iv = c.in[1]->values;
    for (size_t t = 0; t + depth <= iv.size(); t += depth) {
      int64_t flat = 0;
      for (int64_t k = 0; k < depth; ++k) {
        int64_t i = toInt(iv[t + k]);
        if (i < -x[k] || i >= x[k])
          fail(c.node, "index " + std::to_string(i) + " out of range");
        flat = flat * x[k] + (i < 0 ? i + x[k] : i);
      }
      for (int64_t e = 0; e < sliceSize; ++e)
        v.push_back(c.in[0]->values[flat * sliceSize + e]);
    }
    c.setValues(0, std::move(v));
  };
  // Scatters write into a copy of `data`.
  for (const char *op : {"ScatterND", "ScatterElements", "Scatter"})
    r[op] = [](Ctx &c) {
      c.input(1);
      c.input(2);
      c.same();
    };
  // Opset 23's fused ops. Attention: Q, K, V as [batch, heads, seq, dim] or
  // [batch, seq, heads · dim] (with q_num_heads / kv_num_heads).
  r["Attention"] = [](Ctx &c) {
    const Shape &q = c.shape(0), &k = c.shape(1), &v = c.shape(2);
    if (q.size() != k.size() || q.size() != v.size() ||
        (q.size() != 3 && q.size() != 4))
      fail(c.node, "Q, K and V must all be 3-d or all 4-d, got " +
                       shapeStr(q) + ", " + shapeStr(k) + ", " + shapeStr(v));
    int64_t past = c.has(4) && c.shape(4).size() == 4 ? c.shape(4)[2] : 0;
    ElemType t = c.input(0).type;
    int64_t batch = q[0], heads, sq, kvHeads, skv, d, dv;
    if (q.size() == 4) {
      heads = q[1], sq = q[2], d = q[3];
      kvHeads = k[1], skv = k[2], dv = v[3];
      c.result(0, t, {batch, heads, sq, dv});
    } else {
      heads = attrInt(c.node, "q_num_heads", 0);
      kvHeads = attrInt(c.node, "kv_num_heads", 0);
      if (heads <= 0 || kvHeads <= 0 || q[2] % heads || k[2] % kvHeads ||
          v[2] % kvHeads)
        fail(c.node, "3-d Q, K and V need q_num_heads and kv_num_heads that "
                     "divide their last dims");
      sq = q[1], skv = k[1], d = q[2] / heads, dv = v[2] / kvHeads;
      c.result(0, t, {batch, sq, heads * dv});
    }
    if (k[0] != batch || v[0] != batch || kvHeads <= 0 || heads % kvHeads)
      fail(c.node, "key-value heads " + std::to_string(kvHeads) +
                       " do not divide query heads " + std::to_string(heads));
    if (c.node.outputs.size() > 1 && !c.node.outputs[1].empty())
      c.result(1, t, {batch, kvHeads, past + skv, d});
    if (c.node.outputs.size() > 2 && !c.node.outputs[2].empty())
      c.result(2, t, {batch, kvHeads, past + skv, dv});
    if (c.node.outputs.size() > 3 && !c.node.outputs[3].empty())
      c.result(3, t, {batch, heads, sq, past + skv});
  };
  r["RMSNormalization"] = [](Ctx &c) {
    c.input(1);
    c.same();
  };
  r["RotaryEmbedding"] = [](Ctx &c) {
    c.input(1);
    c.input(2);
    c.same();
  };
  r["Squeeze"] = [](Ctx &c) {
    const Shape &x = c.shape(0);
    std::vector<int64_t> axes = c.opset >= 13
                                    ? (c.has(1) ? c.ints(1, "axes") : Shape{})
                                    : attrInts(c.node, "axes");
    std::vector<bool> drop(x.size(), false);
    if (axes.empty())
      for (size_t i = 0; i < x.size(); ++i)
        drop[i] = x[i] == 1;
    for (int64_t a : axes) {
      int64_t k = c.axis(a, x.size());
      if (x[k] != 1)
        fail(c.node, "cannot squeeze axis of size " + std::to_string(x[k]));
      drop[k] = true;
    }
    Shape r;
    for (size_t i = 0; i < x.size(); ++i)
      if (!drop[i])
        r.push_back(x[i]);
    c.result(0, c.input(0).type, r);
    if (c.isConst(0))
      c.setValues(0, c.in[0]->values);
  };
  r["Unsqueeze"] = [](Ctx &c) {
    const Shape &x = c.shape(0);
    std::vector<int64_t> axes =
        c.opset >= 13 ? c.ints(1, "axes") : attrInts(c.node, "axes");
    int64_t rank = x.size() + axes.size();
    std::vector<bool> ins(rank, false);
    for (int64_t a : axes) {
      int64_t k = c.axis(a, rank);
      if (ins[k])
        fail(c.node, "axis " + std::to_string(a) + " given twice");
      ins[k] = true;
    }
    Shape r;
    for (int64_t i = 0, j = 0; i < rank; ++i)
      r.push_back(ins[i] ? 1 : x[j++]);
    c.result(0, c.input(0).type, r);
    if (c.isConst(0))
      c.setValues(0, c.in[0]->values);
  };
  r["Expand"] = [](Ctx &c) {
    std::vector<int64_t> target = c.ints(1, "shape");
    Shape x = c.shape(0);
    size_t n = std::max(x.size(), target.size());
    x.insert(x.begin(), n - x.size(), 1);
    target.insert(target.begin(), n - target.size(), 1);
    Shape r;
    for (size_t i = 0; i < n; ++i) {
      if (x[i] != target[i] && x[i] != 1 && target[i] != 1)
        fail(c.node,
             "cannot expand " + shapeStr(c.shape(0)) + " to the target shape");
      r.push_back(x[i] == 1 ? target[i] : x[i]);
    }
    c.result(0, c.input(0).type, r);
    if (c.isConst(0) && product(r) <= kMaxFoldElements) {
      std::vector<double> v(product(r));
      for (int64_t e = 0; e < (int64_t)v.size(); ++e)
        v[e] = c.in[0]->values[broadcastIndex(r, c.in[0]->shape, e)];
      c.setValues(0, v);
    }
  };
  r["Tile"] = [](Ctx &c) {
    std::vector<int64_t> reps = c.ints(1, "repeats");
    Shape r = c.shape(0);
    if (reps.size() != r.size())
      fail(c.node, "repeats do not match the rank");
    for (size_t i = 0; i < r.size(); ++i) {
      if (reps[i] < 0)
        fail(c.node, "negative repeat");
      r[i] = product({r[i], reps[i]});
    }
    c.result(0, c.input(0).type, r);
  };
  r["Pad"] = [](Ctx &c) {
    Shape r = c.shape(0);
    std::vector<int64_t> pads =
        c.opset >= 11 ? c.ints(1, "pads") : attrInts(c.node, "pads");
    std::vector<int64_t> axes;
    if (c.opset >= 18 && c.has(3))
      axes = c.ints(3, "axes");
    if (axes.empty())
      for (size_t i = 0; i < r.size(); ++i)
        axes.push_back(i);
    if (pads.size() != 2 * axes.size())
      fail(c.node, "pads do not match the rank");
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t &d = r[c.axis(axes[i], r.size())];
      d = add(c.node, add(c.node, d, pads[i]), pads[i + axes.size()]);
    }
    c.result(0, c.input(0).type, r);
  };
  auto resize = [](Ctx &c) {
    Shape x = c.shape(0), r = x;
    // Upsample (opset < 10) and Resize 10 take scales as input 1; Resize 11+
    // takes roi, scales, sizes.
    size_t scalesIdx = (c.node.opType == "Upsample" || c.opset < 11) ? 1 : 2;
    if (c.node.opType == "Upsample" && c.opset < 9) {
      std::vector<double> s;
      if (const AttrDesc *a = findAttr(c.node, "scales"))
        s = a->floats;
      if (s.size() != x.size())
        fail(c.node, "scales do not match the rank");
      for (size_t i = 0; i < x.size(); ++i)
        r[i] = toInt(std::floor(x[i] * s[i]));
    } else if (c.has(3) && c.input(3).numElements() > 0) {
      std::vector<int64_t> sizes = c.ints(3, "sizes");
      std::vector<int64_t> axes = attrInts(c.node, "axes");
      if (axes.empty())
        for (size_t i = 0; i < x.size(); ++i)
          axes.push_back(i);
      if (sizes.size() != axes.size())
        fail(c.node, "sizes do not match the rank");
      for (size_t i = 0; i < axes.size(); ++i)
        r[c.axis(axes[i], x.size())] = sizes[i];
    } else {
      if (!c.isConst(scalesIdx))
        c.notConstant(scalesIdx, "scales");
      const std::vector<double> &s = c.in[scalesIdx]->values;
      std::vector<int64_t> axes = attrInts(c.node, "axes");
      if (axes.empty())
        for (size_t i = 0; i < x.size(); ++i)
          axes.push_back(i);
      if (s.size() != axes.size())
        fail(c.node, "scales do not match the rank");
      for (size_t i = 0; i < axes.size(); ++i) {
        int64_t a = c.axis(axes[i], x.size());
        r[a] = toInt(std::floor(x[a] * s[i] + 1e-9));
      }
    }
    c.result(0, c.input(0).type, r);
  };
  r["Resize"] = resize;
  r["Upsample"] = resize;
  r["Shape"] = [](Ctx &c) {
    const Shape &x = c.shape(0);
    int64_t rank = x.size();
    int64_t start = attrInt(c.node, "start", 0),
            end = attrInt(c.node, "end", rank);
    if (start < 0)
      start += rank;
    if (end < 0)
      end += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, start, rank);
    c.result(0, ElemType::Int64, {end - start});
    c.setValues(0, std::vector<double>(x.begin() + start, x.begin() + end));
  };
  r["Size"] = [](Ctx &c) {
    c.result(0, ElemType::Int64, {});
    c.setValues(0, {double(product(c.shape(0)))});
  };
  r["Range"] = [](Ctx &c) {
    double s = c.scalar(0, "start"), l = c.scalar(1, "limit"),
           d = c.scalar(2, "delta");
    if (d == 0)
      fail(c.node, "delta is 0");
    int64_t n = std::max<int64_t>(0, toInt(std::ceil((l - s) / d)));
    c.result(0, c.input(0).type, {n});
    if (n <= kMaxFoldElements) {
      std::vector<double> v;
      for (int64_t i = 0; i < n; ++i)
        v.push_back(s + i * d);
      c.setValues(0, v);
    }
  };
  r["ConstantOfShape"] = [](Ctx &c) {
    std::vector<int64_t> shape = c.ints(0, "shape");
    ElemType t = ElemType::Float;
    double fill = 0;
    if (const AttrDesc *a = findAttr(c.node, "value")) {
      t = a->tensor.type;
      if (!a->tensor.values.empty())
        fill = a->tensor.values[0];
    }
    c.result(0, t, shape);
    if (product(shape) <= kMaxFoldElements && !isFloatType(t))
      c.setValues(0, std::vector<double>(product(shape), fill));
  };
  // Reductions.
  auto reduce = [](int64_t axesInputOpset) {
    return [axesInputOpset](Ctx &c) {
      const Shape &x = c.shape(0);
      std::vector<int64_t> axes;
      if (c.node.opType == "ArgMax" || c.node.opType == "ArgMin")
        axes = {attrInt(c.node, "axis", 0)};
      else
        axes = reduceAxes(c, axesInputOpset);
      bool keep = attrInt(c.node, "keepdims", 1);
      bool noop = attrInt(c.node, "noop_with_empty_axes", 0);
      std::vector<bool> red(x.size(), axes.empty() && !noop);
      for (int64_t a : axes)
        red[c.axis(a, x.size())] = true;
      Shape r;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!red[i])
          r.push_back(x[i]);
        else if (keep)
          r.push_back(1);
      }
      bool arg = c.node.opType == "ArgMax" || c.node.opType == "ArgMin";
      c.result(0, arg ? ElemType::Int64 : c.input(0).type, r);
      if (c.isConst(0) && x.size() <= 1 && !arg && product(r) == 1) {
        const std::vector<double> &v = c.in[0]->values;
        double acc = c.node.opType == "ReduceProd" ? 1 : 0;
        for (double e : v)
          acc = c.node.opType == "ReduceProd" ? acc * e : acc + e;
        if (c.node.opType == "ReduceProd" || c.node.opType == "ReduceSum")
          c.setValues(0, {acc});
      }
    };
  };
  for (const char *op :
       {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
        "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"})
    r[op] = reduce(18);
  r["ReduceSum"] = reduce(13);
  r["ArgMax"] = reduce(1000);
  r["ArgMin"] = reduce(1000);
  // Pooling.
  auto pool = [](Ctx &c) {
    const Shape &x = c.shape(0);
    if (x.size() < 3)
      fail(c.node, "input rank below 3");
    Shape r = windowedShape(c, x, attrInts(c.node, "kernel_shape"), x[1],
                            attrInt(c.node, "ceil_mode", 0));
    c.result(0, c.input(0).type, r);
    if (c.node.outputs.size() > 1)
      c.result(1, ElemType::Int64, r);
  };
  r["MaxPool"] = pool;
  r["AveragePool"] = pool;
  r["LpPool"] = pool;
  auto globalPool = [](Ctx &c) {
    Shape r = c.shape(0);
    for (size_t i = 2; i < r.size(); ++i)
      r[i] = 1;
    c.result(0, c.input(0).type, r);
  };
  r["GlobalAveragePool"] = globalPool;
  r["GlobalMaxPool"] = globalPool;
  // Recurrent layers: X [seq, batch, input] (layout 0).
  auto recurrent = [](Ctx &c) {
    Shape x = c.shape(0);
    const Shape &w = c.shape(1);
    if (x.size() != 3 || w.size() != 3)
      fail(c.node, "X and W must be 3-d");
    int64_t hidden = attrInt(c.node, "hidden_size", 0);
    if (hidden <= 0)
      fail(c.node, "hidden_size attribute missing");
    bool batchFirst = attrInt(c.node, "layout", 0) == 1;
    int64_t seq = batchFirst ? x[1] : x[0], batch = batchFirst ? x[0] : x[1];
    int64_t dirs = w[0];
    ElemType t = c.input(0).type;
    if (batchFirst) {
      c.result(0, t, {batch, seq, dirs, hidden});
      for (size_t i = 1; i < c.node.outputs.size(); ++i)
        c.result(i, t, {batch, dirs, hidden});
    } else {
      c.result(0, t, {seq, dirs, batch, hidden});
      for (size_t i = 1; i < c.node.outputs.size(); ++i)
        c.result(i, t, {dirs, batch, hidden});
    }
  };
  r["LSTM"] = recurrent;
  r["GRU"] = recurrent;
  r["RNN"] = recurrent;
  r["TopK"] = [](Ctx &c) {
    Shape x = c.shape(0);
    int64_t axis = c.axis(attrInt(c.node, "axis", -1), x.size());
    int64_t k = attrInt(c.node, "k", 1);
    if (c.opset >= 10) {
      std::vector<int64_t> ks = c.ints(1, "k");
      if (ks.size() != 1)
        fail(c.node, "k must hold one value, holds " +
                         std::to_string(ks.size()));
      k = ks[0];
    }
    if (k < 0 || k > x[axis])
      fail(c.node, "k " + std::to_string(k) + " outside 0.." +
                       std::to_string(x[axis]));
    x[axis] = k;
    c.result(0, c.input(0).type, x);
    c.result(1, ElemType::Int64, x);
  };
  // Same shape, another element type.
  r["BitShift"] = [](Ctx &c) {
    c.result(0, c.input(0).type, broadcast(c));
  };
  r["DequantizeLinear"] = [](Ctx &c) {
    c.same().type = c.input(1).type; // x_scale's type
  };
  r["DynamicQuantizeLinear"] = [](Ctx &c) {
    c.same().type = ElemType::UInt8;
    c.result(1, ElemType::Float, {});
    c.result(2, ElemType::UInt8, {});
  };
  r["QuantizeLinear"] = [](Ctx &c) {
    c.same().type = c.has(2) ? c.input(2).type : ElemType::UInt8;
  };
  auto like = [](Ctx &c) {
    ValueDesc &v = c.same();
    if (findAttr(c.node, "dtype"))
      v.type = elemTypeFromOnnx(int32_t(attrInt(c.node, "dtype", 1)));
    if (v.type == ElemType::Undefined)
      fail(c.node, "unknown dtype");
  };
  r["RandomNormalLike"] = like;
  r["RandomUniformLike"] = like;
  r["EyeLike"] = like;
  auto random = [](Ctx &c) {
    ElemType t = elemTypeFromOnnx(int32_t(attrInt(c.node, "dtype", 1)));
    if (t == ElemType::Undefined)
      fail(c.node, "unknown dtype");
    c.result(0, t, attrInts(c.node, "shape"));
  };
  r["RandomNormal"] = random;
  r["RandomUniform"] = random;
  // Losses: the class axis is 1; "none" keeps the rest, else a scalar.
  auto loss = [](Ctx &c) {
    const Shape &x = c.shape(0);
    if (x.size() < 2)
      fail(c.node, "scores " + shapeStr(x) + " have no class axis");
    Shape rest = {x[0]};
    rest.insert(rest.end(), x.begin() + 2, x.end());
    bool none = attrString(c.node, "reduction", "mean") == "none";
    c.result(0, c.input(0).type, none ? rest : Shape{});
    if (c.node.outputs.size() > 1)
      c.result(1, c.input(0).type, x); // log-probabilities
  };
  r["SoftmaxCrossEntropyLoss"] = loss;
  r["NegativeLogLikelihoodLoss"] = loss;
  // CumSum folded on constants: transformers 5 finds packed sequences in
  // the position ids with a cumulative sum, so its causal mask (a constant
  // once the sequence is bound) passes through one.
  r["CumSum"] = [](Ctx &c) {
    c.same();
    if (!c.isConst(0) || !c.isConst(1) ||
        c.out[0].numElements() > kMaxFoldElements)
      return;
    const Shape &x = c.shape(0);
    std::vector<int64_t> axes = c.ints(1, "axis");
    if (axes.size() != 1 || x.empty())
      return;
    int64_t axis = c.axis(axes[0], int64_t(x.size()));
    bool exclusive = attrInt(c.node, "exclusive", 0) != 0;
    bool reverse = attrInt(c.node, "reverse", 0) != 0;
    int64_t inner = 1;
    for (size_t d = axis + 1; d < x.size(); ++d)
      inner *= x[d];
    int64_t n = x[axis], outer = c.out[0].numElements() / std::max<int64_t>(1, n * inner);
    const std::vector<double> &in = c.in[0]->values;
    std::vector<double> v(in.size());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        double sum = 0;
        for (int64_t step = 0; step < n; ++step) {
          int64_t k = reverse ? n - 1 - step : step;
          size_t at = size_t((o * n + k) * inner + i);
          if (exclusive) {
            v[at] = sum;
            sum += in[at];
          } else {
            sum += in[at];
            v[at] = sum;
          }
        }
      }
    c.setValues(0, std::move(v));
  };
  r["OneHot"] = [](Ctx &c) {
    const Shape &idx = c.shape(0);
    std::vector<int64_t> depth = c.ints(1, "depth");
    if (depth.size() != 1 || depth[0] < 1)
      fail(c.node, "depth must be one positive value");
    int64_t rank = idx.size() + 1;
    int64_t axis = c.axis(attrInt(c.node, "axis", -1), rank);
    Shape r = idx;
    r.insert(r.begin() + axis, depth[0]);
    c.result(0, c.input(2).type, r);
  };
  auto blocks = [](bool toSpace) {
    return [toSpace](Ctx &c) {
      const Shape &x = c.shape(0);
      int64_t b = attrInt(c.node, "blocksize", 0);
      if (x.size() != 4 || b < 1)
        fail(c.node, "needs a 4-d input and a positive blocksize");
      int64_t bb = mul(c.node, b, b);
      if (toSpace ? x[1] % bb : (x[2] % b || x[3] % b))
        fail(c.node, "blocksize " + std::to_string(b) + " does not divide " +
                         shapeStr(x));
      c.result(0, c.input(0).type,
               toSpace ? Shape{x[0], x[1] / bb, mul(c.node, x[2], b),
                               mul(c.node, x[3], b)}
                       : Shape{x[0], mul(c.node, x[1], bb), x[2] / b,
                               x[3] / b});
    };
  };
  r["DepthToSpace"] = blocks(true);
  r["SpaceToDepth"] = blocks(false);
  r["GlobalLpPool"] = r["GlobalAveragePool"];
  r["GridSample"] = [](Ctx &c) {
    const Shape &x = c.shape(0), &grid = c.shape(1);
    if (x.size() < 3 || grid.size() != x.size() || grid[0] != x[0] ||
        grid.back() != int64_t(x.size()) - 2)
      fail(c.node, "grid " + shapeStr(grid) + " does not fit input " +
                       shapeStr(x));
    Shape r = {x[0], x[1]};
    r.insert(r.end(), grid.begin() + 1, grid.end() - 1);
    c.result(0, c.input(0).type, r);
  };
  r["Det"] = [](Ctx &c) {
    const Shape &x = c.shape(0);
    if (x.size() < 2 || x[x.size() - 1] != x[x.size() - 2])
      fail(c.node, "input " + shapeStr(x) + " is not square matrices");
    c.result(0, c.input(0).type, Shape(x.begin(), x.end() - 2));
  };
  r["Einsum"] = [](Ctx &c) {
    // Output labels from "ij,jk->ik"; implicit form sorts the unique labels.
    std::string eq = attrString(c.node, "equation", "");
    eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
    size_t arrow = eq.find("->");
    std::vector<std::string> terms;
    std::string lhs = eq.substr(0, arrow);
    for (size_t p = 0, q; p <= lhs.size(); p = q + 1) {
      q = lhs.find(',', p);
      if (q == std::string::npos)
        q = lhs.size();
      terms.push_back(lhs.substr(p, q - p));
    }
    if (terms.size() != c.numIn() || eq.find("...") != std::string::npos)
      fail(c.node, "unsupported einsum equation '" + eq + "'");
    std::map<char, int64_t> dims;
    for (size_t i = 0; i < terms.size(); ++i) {
      if (terms[i].size() != c.shape(i).size())
        fail(c.node, "equation rank mismatch");
      for (size_t j = 0; j < terms[i].size(); ++j)
        dims[terms[i][j]] = c.shape(i)[j];
    }
    std::string outLabels;
    if (arrow != std::string::npos)
      outLabels = eq.substr(arrow + 2);
    else {
      std::map<char, int> count;
      for (auto &t : terms)
        for (char ch : t)
          count[ch]++;
      for (auto &[ch, n] : count)
        if (n == 1)
          outLabels += ch;
    }
    Shape r;
    for (char ch : outLabels) {
      if (!dims.count(ch))
        fail(c.node, "unknown output label in equation");
      r.push_back(dims[ch]);
    }
    c.result(0, c.input(0).type, r);
  };
  return r;
}

const std::map<std::string, Rule> &rules() {
  static const std::map<std::string, Rule> r = buildRules();
  return r;
}

} // namespace

bool inferNode(const NodeDesc &node, int64_t opset,
               const std::vector<const ValueDesc *> &inputs,
               std::vector<ValueDesc> &outputs) {
  if (!node.domain.empty() && node.domain != "ai.onnx")
    return false;
  auto it = rules().find(node.opType);
  if (it == rules().end())
    return false;
  outputs.assign(node.outputs.size(), ValueDesc{});
  Ctx ctx{node, opset, inputs, outputs};
  it->second(ctx);
  // A rule may state more results than the node names (TopK's indices, a
  // Dropout's mask): the node's own outputs are what exists.
  outputs.resize(node.outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    outputs[i].name = node.outputs[i];
    if (outputs[i].type == ElemType::Undefined && !node.outputs[i].empty())
      fail(node, "no type inferred for output '" + node.outputs[i] + "'");
  }
  return true;
}

} // namespace orrery::onnx::detail
