//===- FuzzStrategy.cpp - the strategy string parser on arbitrary text ----===//
#include "orrery/CostModel/Strategy.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  auto s = orrery::parseStrategy(text);
  if (!s) {
    std::string msg = llvm::toString(s.takeError());
    if (msg.empty() || msg.find('\n') != std::string::npos) {
      std::fprintf(stderr, "bad error text: '%s'\n", msg.c_str());
      std::abort();
    }
  }
  return 0;
}
