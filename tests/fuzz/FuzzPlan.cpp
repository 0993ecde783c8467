//===- FuzzPlan.cpp - the plan file readers on arbitrary JSON -------------===//
#include "FuzzSupport.h"
#include "orrery/CostModel/JsonInput.h"
#include "orrery/Plan/Plan.h"

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  std::string problem;
  nlohmann::json plan = orrery::parseJsonInput(text, problem);
  if (plan.is_discarded()) {
    orrery::fuzz::expectOneLine(problem);
    return 0;
  }
  auto a = orrery::assumptionsFromPlan(plan, "fuzz.json");
  orrery::fuzz::succeeded(a);
  if (orrery::isHeteroPlan(plan)) {
    auto s = orrery::heteroStrategyFromPlan(plan, "fuzz.json");
    orrery::fuzz::succeeded(s);
  } else {
    auto s = orrery::strategyFromPlan(plan, "fuzz.json");
    orrery::fuzz::succeeded(s);
  }
  return 0;
}
