//===- FuzzPrograms.cpp - the program-set reader on arbitrary JSON --------===//
//
// What `orrery-run` reads: a set that parses must also pass or fail the
// static check (the whole set's, or each lowered rank's of a partial one),
// never crash it.
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
  if (set->whole())
    return 0;
  for (const orrery::Program &p : set->ranks)
    if (p.lowered)
      if (llvm::Error e = orrery::checkRank(*set, p.rank))
        orrery::fuzz::expectOneLine(llvm::toString(std::move(e)));
  return 0;
}
