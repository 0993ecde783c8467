//===- FuzzPlan.cpp - the plan file readers on arbitrary JSON -------------===//
#include "orrery/Plan/Plan.h"

#include "orrery/CostModel/JsonInput.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {
template <typename T> void check(llvm::Expected<T> r) {
  if (r)
    return;
  std::string msg = llvm::toString(r.takeError());
  if (msg.empty() || msg.find('\n') != std::string::npos) {
    std::fprintf(stderr, "bad error text: '%s'\n", msg.c_str());
    std::abort();
  }
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  std::string problem;
  nlohmann::json plan = orrery::parseJsonInput(text, problem);
  if (plan.is_discarded())
    return 0;
  check(orrery::assumptionsFromPlan(plan, "fuzz.json"));
  if (orrery::isHeteroPlan(plan))
    check(orrery::heteroStrategyFromPlan(plan, "fuzz.json"));
  else
    check(orrery::strategyFromPlan(plan, "fuzz.json"));
  return 0;
}
