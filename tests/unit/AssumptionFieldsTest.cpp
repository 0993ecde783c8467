//===- AssumptionFieldsTest.cpp - the framework assumptions' one table ---===//
//
// Every row of the table round-trips through a plan: written into
// `predicted`, read back by the plan reader the exporters and `check` use;
// a wrong value is a one-line error naming the field or the flag.
//
//===----------------------------------------------------------------------===//

#include "orrery/CostModel/AssumptionFields.h"
#include "orrery/Plan/Plan.h"

#include <gtest/gtest.h>

using namespace orrery;

namespace {

/// A value of `f` other than the default's.
double otherValue(const AssumptionField &f) {
  Assumptions defaults;
  double now = f.get(defaults);
  if (f.isChoice())
    return now == 0 ? double(f.names.size() - 1) : 0;
  for (double v : f.allowed)
    if (v != now)
      return v;
  return f.maxValue < 1e300 ? f.maxValue : now + 1e6;
}

} // namespace

TEST(AssumptionFields, EveryRowRoundTripsThroughAPlan) {
  ASSERT_FALSE(assumptionFields().empty());
  for (const AssumptionField &f : assumptionFields()) {
    Assumptions a;
    double v = otherValue(f);
    ASSERT_FALSE(bool(setAssumption(f, v, a))) << f.planKey;
    nlohmann::ordered_json predicted = nlohmann::ordered_json::object();
    writeAssumptionFields(a, predicted);
    nlohmann::json plan = {
        {"predicted", nlohmann::json::parse(predicted.dump())}};
    auto back = assumptionsFromPlan(plan, "plan.json");
    ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
    EXPECT_EQ(f.get(*back), v) << f.planKey;
    // The other rows read back as written (the reduced bytes follow the
    // kept ones unless set).
    for (const AssumptionField &g : assumptionFields())
      EXPECT_EQ(g.get(*back), g.get(a)) << g.planKey;
  }
}

TEST(AssumptionFields, NamesAreUniqueAndKeywordsAreTheFlags) {
  const auto &rows = assumptionFields();
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(assumptionFieldByFlag(rows[i].flag), &rows[i]);
    if (rows[i].pythonKeyword)
      EXPECT_EQ(assumptionFieldByKeyword(rows[i].keyword()), &rows[i]);
    for (size_t j = i + 1; j < rows.size(); ++j) {
      EXPECT_STRNE(rows[i].planKey, rows[j].planKey);
      EXPECT_STRNE(rows[i].flag, rows[j].flag);
    }
  }
  EXPECT_EQ(assumptionFieldByFlag("grad-bites"), nullptr);
}

TEST(AssumptionFields, WrongValuesNameTheFieldOrTheFlag) {
  for (const AssumptionField &f : assumptionFields()) {
    nlohmann::json plan = {{"predicted",
                            {{f.planKey, f.isChoice() ? nlohmann::json("bogus")
                                                      : nlohmann::json(-3)}}}};
    auto read = assumptionsFromPlan(plan, "p.json");
    ASSERT_FALSE(bool(read)) << f.planKey;
    std::string message = llvm::toString(read.takeError());
    EXPECT_NE(message.find(std::string("p.json: predicted.") + f.planKey +
                           ": must be "),
              std::string::npos)
        << message;
    Assumptions a;
    llvm::Error e = setAssumption(f, -3, a);
    ASSERT_TRUE(bool(e)) << f.flag;
    message = llvm::toString(std::move(e));
    EXPECT_EQ(message.find(std::string("--") + f.flag + " "), 0u) << message;
    EXPECT_NE(message.find("expected"), std::string::npos) << message;
  }
  const AssumptionField *g = assumptionFieldByFlag("pipeline-gradients");
  ASSERT_NE(g, nullptr);
  auto bad = assumptionChoice(*g, "halves");
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()),
            "--pipeline-gradients 'halves': expected partitioned or whole");
}

TEST(AssumptionFields, APlanWithoutKernelsWasPricedWithTheScoresInMemory) {
  auto a = assumptionsFromPlan({{"predicted", nlohmann::json::object()}}, "p");
  ASSERT_TRUE(bool(a));
  EXPECT_EQ(a->fusion, KernelFusion::UnfusedAttention);
}
