//===- FuzzPrograms.cpp - the program-set reader on arbitrary JSON --------===//
//
// What `orrery-run` reads: a set that parses must also pass or fail the
// static check, never crash it.
//
//===----------------------------------------------------------------------===//
#include "FuzzSupport.h"
#include "orrery/CostModel/JsonInput.h"
#include "orrery/CostModel/Program.h"

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  std::string problem;
  nlohmann::json j = orrery::parseJsonInput(text, problem);
  if (j.is_discarded()) {
    orrery::fuzz::expectOneLine(problem);
    return 0;
  }
  auto set = orrery::programSetFromJson(j);
  if (!orrery::fuzz::succeeded(set))
    return 0;
  if (llvm::Error e = orrery::checkPrograms(*set))
    orrery::fuzz::expectOneLine(llvm::toString(std::move(e)));
  return 0;
}
