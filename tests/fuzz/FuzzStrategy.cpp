//===- FuzzStrategy.cpp - the strategy string parser on arbitrary text ----===//
#include "FuzzSupport.h"
#include "orrery/CostModel/Strategy.h"

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  auto s = orrery::parseStrategy(text);
  orrery::fuzz::succeeded(s);
  return 0;
}
