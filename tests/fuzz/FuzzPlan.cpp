//===- FuzzPlan.cpp - the plan file readers on arbitrary JSON -------------===//
//
// The readers, and every exporter on what they accept (`orrery export
// --to X`): each answers a plan or one line, never a crash.
//
//===----------------------------------------------------------------------===//
#include "FuzzSupport.h"
#include "orrery/CostModel/JsonInput.h"
#include "orrery/Export/Exporters.h"
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
    auto text = orrery::exportHeteroPytorch(plan, "fuzz.json");
    orrery::fuzz::succeeded(text);
    return 0;
  }
  auto s = orrery::strategyFromPlan(plan, "fuzz.json");
  orrery::fuzz::succeeded(s);
  auto p = orrery::readExportPlan(plan, "fuzz.json");
  if (!orrery::fuzz::succeeded(p))
    return 0;
  for (const std::string &format : orrery::exportFormats()) {
    auto text = orrery::exportPlan(*p, format);
    orrery::fuzz::succeeded(text);
  }
  return 0;
}
