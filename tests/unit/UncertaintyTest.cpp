//===- UncertaintyTest.cpp - the band a prediction carries ---------------===//
//
// The band is the prediction times quantiles of measured over predicted
// over the published runs of its regime: exact on a basis of known rows;
// wider where the regime borrows runs or a mechanism is unchecked; a bad
// basis file is a one-line error naming it.
//
//===----------------------------------------------------------------------===//

#include "orrery/CostModel/Uncertainty.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

using namespace orrery;

namespace {

std::string writeBasis(const std::string &name, const std::string &text) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

std::string row(const char *group, const char *family, const char *mechanisms,
                double step, double memory = 0) {
  std::string r = std::string("{\"group\": \"") + group +
                  "\", \"device_family\": \"" + family +
                  "\", \"kernels\": \"fused\", \"mechanisms\": [" + mechanisms +
                  "], \"measured_over_predicted_step\": " +
                  std::to_string(step);
  if (memory > 0)
    r += ", \"measured_over_predicted_peak_memory\": " + std::to_string(memory);
  return r + "}";
}

/// Restores the built-in basis when a test ends.
struct BuiltinAfter {
  ~BuiltinAfter() { llvm::consumeError(setUncertaintyBasis("")); }
};

} // namespace

TEST(Uncertainty, QuantilesOfTheRegimesRuns) {
  BuiltinAfter restore;
  std::string rows;
  const double ratios[] = {1.0, 1.1, 1.2, 1.3, 1.4};
  for (double r : ratios)
    rows += (rows.empty() ? "" : ",") + row("Paper_A", "X", "", r, r);
  std::string path = writeBasis(
      "basis-quantiles.json",
      "{\"schema\": \"orrery-validation-errors\", \"rows\": [" + rows + "]}");
  ASSERT_FALSE(bool(setUncertaintyBasis(path)));
  Uncertainty u = uncertaintyOf(Regime{"X", "fused", {}}, 10, 100);
  EXPECT_EQ(u.stepRows, 5);
  EXPECT_FALSE(u.borrowed);
  EXPECT_NEAR(u.stepS.p10, 10.4, 1e-9); // 1.0 + 0.4 x (1.1 - 1.0)
  EXPECT_NEAR(u.stepS.p50, 12.0, 1e-9);
  EXPECT_NEAR(u.stepS.p90, 13.6, 1e-9);
  EXPECT_EQ(u.memoryRows, 5);
  EXPECT_NEAR(u.peakMemoryBytes.p50, 120, 1e-9);
}

TEST(Uncertainty, BorrowedRunsAndUncheckedMechanismsWiden) {
  BuiltinAfter restore;
  // Paper_A's stack sits 1.2x from the model, Paper_B's 1.0x; device X
  // has five runs of its own, device Y one.
  std::string rows;
  for (double r : {1.15, 1.2, 1.2, 1.25, 1.2})
    rows += (rows.empty() ? "" : ",") + row("Paper_A", "X", "", r);
  rows += "," + row("Paper_B", "Y", "\"fsdp\"", 1.0);
  std::string path = writeBasis(
      "basis-widen.json",
      "{\"schema\": \"orrery-validation-errors\", \"rows\": [" + rows + "]}");
  ASSERT_FALSE(bool(setUncertaintyBasis(path)));
  Uncertainty own = uncertaintyOf(Regime{"X", "fused", {}}, 10, 0);
  Uncertainty unchecked =
      uncertaintyOf(Regime{"X", "fused", {"activation-offload"}}, 10, 0);
  Uncertainty borrowed = uncertaintyOf(Regime{"Y", "fused", {}}, 10, 0);
  ASSERT_EQ(unchecked.unvalidated.size(), 1u);
  EXPECT_EQ(unchecked.unvalidated[0], "activation-offload");
  EXPECT_GT(unchecked.stepS.p90, own.stepS.p90);
  EXPECT_DOUBLE_EQ(unchecked.stepS.p50, own.stepS.p50);
  EXPECT_TRUE(borrowed.borrowed);
  EXPECT_FALSE(own.borrowed);
  // A run that used FSDP joins only a prediction that uses FSDP too.
  Uncertainty fsdp = uncertaintyOf(Regime{"X", "fused", {"fsdp"}}, 10, 0);
  EXPECT_EQ(fsdp.stepRows, own.stepRows + 1);
  EXPECT_TRUE(own.unvalidated.empty());
  // No memory band without five runs stating peak memory.
  EXPECT_EQ(own.memoryRows, 0);
}

TEST(Uncertainty, TheBuiltinBasisGivesEveryRegimeABand) {
  Uncertainty u = uncertaintyOf(
      Regime{"A100", "unfused-attention", {"pipeline", "tensor-parallel"}}, 10,
      0);
  EXPECT_GE(u.stepRows, 5);
  EXPECT_LE(u.stepS.p10, u.stepS.p50);
  EXPECT_LE(u.stepS.p50, u.stepS.p90);
  Uncertainty unknown = uncertaintyOf(Regime{"TPU v5p", "fused", {}}, 10, 0);
  EXPECT_TRUE(unknown.borrowed);
  EXPECT_GT(unknown.stepRows, 0);
}

TEST(Uncertainty, ABadBasisIsAOneLineErrorNamingIt) {
  BuiltinAfter restore;
  struct Case {
    const char *text, *says;
  } cases[] = {
      {"[1, 2]", "not a JSON object"},
      {"{\"schema\": \"x\", \"rows\": []}", "schema"},
      {"{\"schema\": \"orrery-validation-errors\"}", "rows: must be an array"},
      {"{\"schema\": \"orrery-validation-errors\", \"rows\": [{}]}", "rows[0]"},
      {"{\"schema\": \"orrery-validation-errors\", \"rows\": [{\"device_family\": "
       "\"X\", \"kernels\": \"fused\", \"mechanisms\": [], "
       "\"measured_over_predicted_step\": -1}]}",
       "rows[0].measured_over_predicted_step"}};
  for (const Case &c : cases) {
    std::string path = writeBasis("basis-bad.json", c.text);
    llvm::Error e = setUncertaintyBasis(path);
    ASSERT_TRUE(bool(e)) << c.text;
    std::string msg = llvm::toString(std::move(e));
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  llvm::Error missing = setUncertaintyBasis("/nonexistent/basis.json");
  ASSERT_TRUE(bool(missing));
  EXPECT_NE(llvm::toString(std::move(missing)).find("/nonexistent/basis.json"),
            std::string::npos);
}
