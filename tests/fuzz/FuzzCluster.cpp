//===- FuzzCluster.cpp - the cluster spec reader on arbitrary text --------===//
#include "orrery/CostModel/Cluster.h"
#include "orrery/CostModel/Hardware.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  auto c = orrery::parseClusterJson(text, "fuzz.json",
                                    orrery::HardwareCatalog::builtin());
  if (!c) {
    std::string msg = llvm::toString(c.takeError());
    if (msg.empty() || msg.find('\n') != std::string::npos) {
      std::fprintf(stderr, "bad error text: '%s'\n", msg.c_str());
      std::abort();
    }
  }
  return 0;
}
