//===- FuzzCluster.cpp - the cluster spec reader on arbitrary text --------===//
#include "FuzzSupport.h"
#include "orrery/CostModel/Cluster.h"
#include "orrery/CostModel/Hardware.h"

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  auto c = orrery::parseClusterJson(text, "fuzz.json",
                                    orrery::HardwareCatalog::builtin());
  orrery::fuzz::succeeded(c);
  return 0;
}
