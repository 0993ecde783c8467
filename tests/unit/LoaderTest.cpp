//===- LoaderTest.cpp - the ONNX island: errors and symbolic dims ---------===//
#include "TestSupport.h"
#include "orrery/Onnx/GraphDesc.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <gtest/gtest.h>
#include <random>
#include <sstream>
#include <thread>

using namespace orrery::onnx;

namespace {

std::string fixture(const std::string &name) {
  std::ifstream f(orrery::test::sourceDir() + "/models/fixtures/" + name,
                  std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

LoadOptions batch(int64_t b) {
  LoadOptions o;
  o.dims["batch"] = b;
  return o;
}

TEST(Loader, LoadsTheFixtureWithBoundBatch) {
  LoadResult r = loadOnnxModelFromBytes(fixture("tiny-gpt.onnx"),
                                        "tiny-gpt.onnx", batch(4));
  ASSERT_TRUE(r.model) << r.error;
  const GraphDesc &g = r.model->graph;
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.values.at(g.inputs[0]).shape, (std::vector<int64_t>{4, 32}));
  EXPECT_EQ(r.model->boundDims.at("batch"), 4);
  // Shape-only weights: every weight has a shape and no values.
  for (const std::string &w : g.weights) {
    EXPECT_TRUE(g.values.at(w).values.empty()) << w;
    EXPECT_EQ(g.values.at(w).kind, ValueKind::Param) << w;
  }
}

// Integer constants are held as doubles: INT64_MAX (a Slice's open end)
// rounds to 2^63, which no int64 holds; converting it must saturate, not be
// undefined (UBSan's float-cast-overflow found the importer doing so).
TEST(Loader, IntegerConstantsSaturate) {
  EXPECT_EQ(saturatingInt64(double(std::numeric_limits<int64_t>::max())),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(saturatingInt64(-1e19), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(saturatingInt64(double(std::numeric_limits<int64_t>::min())),
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(saturatingInt64(std::nan("")), 0);
  EXPECT_EQ(saturatingInt64(-42.0), -42);
  EXPECT_EQ(saturatingInt64(0x1p62), int64_t(1) << 62);
}

TEST(Loader, UnboundDimIsNamed) {
  LoadResult r = loadOnnxModelFromBytes(fixture("tiny-gpt.onnx"), "m.onnx", {});
  ASSERT_FALSE(r.model);
  EXPECT_NE(r.error.find("unbound symbolic dims: batch in 'input_ids' dim 0"),
            std::string::npos)
      << r.error;
  EXPECT_EQ(r.error.find('\n'), std::string::npos);
}

TEST(Loader, EmptyInput) {
  LoadResult r = loadOnnxModelFromBytes("", "empty.onnx", {});
  ASSERT_FALSE(r.model);
  EXPECT_EQ(r.error, "empty.onnx: empty file");
}

TEST(Loader, MissingFile) {
  LoadResult r = loadOnnxModel("/nonexistent/model.onnx", {});
  ASSERT_FALSE(r.model);
  EXPECT_NE(r.error.find("cannot open file"), std::string::npos) << r.error;
}

TEST(Loader, EveryTruncationFailsCleanly) {
  // Cut the model at many points: each cut is an error, never a crash, and
  // never a model whose graph lost nodes silently.
  std::string bytes = fixture("tiny-gpt.onnx");
  ASSERT_GT(bytes.size(), 1000u);
  for (size_t cut = 1; cut < bytes.size(); cut += 97) {
    LoadResult r =
        loadOnnxModelFromBytes(bytes.substr(0, cut), "cut.onnx", batch(1));
    EXPECT_FALSE(r.model) << "cut at " << cut << " loaded";
    EXPECT_FALSE(r.error.empty());
    EXPECT_EQ(r.error.find('\n'), std::string::npos) << r.error;
  }
}

TEST(Loader, RandomBytesFailCleanly) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 200; ++trial) {
    std::string bytes(1 + rng() % 4096, '\0');
    for (char &c : bytes)
      c = char(rng());
    LoadResult r = loadOnnxModelFromBytes(bytes, "random.onnx", batch(1));
    EXPECT_FALSE(r.model);
    EXPECT_FALSE(r.error.empty());
  }
}

TEST(Loader, FlippedBytesNeverCrash) {
  // Corrupt single bytes of a valid model: loading may succeed (a changed
  // name) or fail, but must return.
  std::string bytes = fixture("tiny-gpt.onnx");
  std::mt19937 rng(99);
  for (int trial = 0; trial < 300; ++trial) {
    std::string b = bytes;
    b[rng() % b.size()] = char(rng());
    LoadResult r = loadOnnxModelFromBytes(b, "flip.onnx", batch(1));
    EXPECT_TRUE(r.model || !r.error.empty());
  }
}

// The shape rules are built once, thread-safely: loads of different models
// at once (the library's promise) infer the same shapes as one at a time.
TEST(Loader, ParallelLoadsInferAlike) {
  std::vector<std::string> names = {"tiny-gpt.onnx", "gpt3-125m.onnx",
                                    "resnet50.onnx", "tiny-gpt.onnx"};
  std::vector<std::string> bytes;
  for (const std::string &n : names)
    bytes.push_back(fixture(n));
  auto shapes = [](const LoadResult &r) {
    std::vector<std::vector<int64_t>> out;
    for (const auto &kv : r.model->graph.values)
      out.push_back(kv.second.shape);
    return out;
  };
  std::vector<LoadResult> alone(names.size()), together(names.size());
  for (size_t i = 0; i < names.size(); ++i)
    alone[i] = loadOnnxModelFromBytes(bytes[i], names[i], batch(2));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < names.size(); ++i)
    threads.emplace_back([&, i] {
      together[i] = loadOnnxModelFromBytes(bytes[i], names[i], batch(2));
    });
  for (std::thread &t : threads)
    t.join();
  for (size_t i = 0; i < names.size(); ++i) {
    ASSERT_TRUE(alone[i].model) << alone[i].error;
    ASSERT_TRUE(together[i].model) << together[i].error;
    EXPECT_EQ(shapes(alone[i]), shapes(together[i])) << names[i];
  }
}

} // namespace
