//===- FuzzPrograms.cpp - the program-set reader on arbitrary JSON --------===//
//
// What `orrery-run` reads: a set that parses must also pass or fail the
// static check, never crash it.
//
//===----------------------------------------------------------------------===//
#include "orrery/CostModel/Program.h"

#include "orrery/CostModel/JsonInput.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  std::string problem;
  nlohmann::json j = orrery::parseJsonInput(text, problem);
  if (j.is_discarded())
    return 0;
  auto set = orrery::programSetFromJson(j);
  if (!set) {
    std::string msg = llvm::toString(set.takeError());
    if (msg.empty() || msg.find('\n') != std::string::npos) {
      std::fprintf(stderr, "bad error text: '%s'\n", msg.c_str());
      std::abort();
    }
    return 0;
  }
  llvm::consumeError(orrery::checkPrograms(*set));
  return 0;
}
