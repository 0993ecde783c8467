//===- FuzzCluster.cpp - the cluster spec reader on arbitrary text --------===//
//
// What parses also prices a small job's goodput with its `reliability`:
// the closed form and a one-day Monte-Carlo answer with a fraction in
// [0, 1] or one line.
//
//===----------------------------------------------------------------------===//
#include "FuzzSupport.h"
#include "orrery/CostModel/Cluster.h"
#include "orrery/CostModel/FailureSimulation.h"
#include "orrery/CostModel/Hardware.h"

#include <cmath>
#include <cstdint>
#include <string>

static void checkGoodput(const orrery::Cluster &c) {
  orrery::GoodputInputs in;
  in.devices = c.numDevices();
  in.nodes = c.numNodes();
  in.devicesPerNode = c.groupOf(0).devicesPerNode;
  in.stepS = 2;
  in.tokensPerStep = 1e6;
  in.checkpointBytes = in.restartReadBytes = 1e11;
  in.deviceToHostBytesPerS = 25e9;
  for (bool async : {false, true}) {
    auto g = orrery::estimateGoodput(c.reliability, in, {async, 0});
    if (!orrery::fuzz::succeeded(g))
      continue;
    if (!(g->ettr >= 0 && g->ettr <= 1) || !(g->intervalSteps >= 1))
      std::abort();
    auto run = orrery::simulateRun(c.reliability, *g, {async, 0}, {1, 1, 2});
    if (orrery::fuzz::succeeded(run) &&
        !(run->ettrP50 >= 0 && run->ettrP50 <= 1))
      std::abort();
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  auto c = orrery::parseClusterJson(text, "fuzz.json",
                                    orrery::HardwareCatalog::builtin());
  if (orrery::fuzz::succeeded(c))
    checkGoodput(*c);
  return 0;
}
