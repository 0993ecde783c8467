//===- FuzzExports.cpp - the serving-plan exporters on arbitrary JSON -----===//
//
// `orrery export --to vllm|sglang|trtllm` on fuzzed serving plans (the
// training-plan exporters are FuzzPlan's): each answers the launch flags or
// one line, never a crash or an escaped exception.
//
//===----------------------------------------------------------------------===//
#include "FuzzSupport.h"
#include "Serve.h"
#include "orrery/CostModel/JsonInput.h"

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  std::string problem;
  nlohmann::json plan = orrery::parseJsonInput(text, problem);
  if (plan.is_discarded() || !orrery::cli::isServingPlan(plan))
    return 0;
  for (const char *to : {"vllm", "sglang", "trtllm"}) {
    auto flags = orrery::cli::exportServingPlan(plan, to, "fuzz.json");
    orrery::fuzz::succeeded(flags);
  }
  return 0;
}
