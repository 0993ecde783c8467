//===- ReliabilityTest.cpp - goodput, checkpoints and the run's failures --===//
#include "orrery/CostModel/Reliability.h"
#include "orrery/CostModel/Cluster.h"
#include "orrery/CostModel/FailureSimulation.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace orrery;

namespace {

/// A Llama-3-sized job: 16,384 devices in 2,048 nodes, a 6 s step.
GoodputInputs bigJob() {
  GoodputInputs in;
  in.devices = 16384;
  in.nodes = 2048;
  in.devicesPerNode = 8;
  in.stepS = 6;
  in.tokensPerStep = 16e6;
  in.checkpointBytes = in.restartReadBytes = 5.7e12;
  in.deviceToHostBytesPerS = 50e9;
  return in;
}

GoodputEstimate estimate(const ReliabilitySpec &spec, const GoodputInputs &in,
                         CheckpointPolicy policy = {}) {
  auto g = estimateGoodput(spec, in, policy);
  EXPECT_TRUE(bool(g)) << (g ? "" : llvm::toString(g.takeError()));
  return g ? *g : GoodputEstimate{};
}

} // namespace

// Daly's worked examples (FGCS 22, 2006): a 5-minute checkpoint with a
// mean time between failures of 24 h, 6 h and 15 min.
TEST(Reliability, DalyIntervalMatchesHisExamples) {
  EXPECT_NEAR(dalyIntervalS(300, 24 * 3600) / 60, 117, 0.5);
  EXPECT_NEAR(dalyIntervalS(300, 6 * 3600) / 60, 57, 0.5);
  EXPECT_NEAR(dalyIntervalS(300, 15 * 60) / 60, 9.1, 0.1);
  // A checkpoint longer than twice the MTBF: checkpoint every MTBF.
  EXPECT_DOUBLE_EQ(dalyIntervalS(1000, 400), 400);
}

// The defaults are Llama 3's counts: its job sees 419 interruptions in 54
// days, one every 3.1 hours.
TEST(Reliability, DefaultsGiveLlama3sInterruptions) {
  ReliabilitySpec spec;
  EXPECT_NEAR(spec.failuresPerHour(16384, 2048) * 54 * 24, 419, 1e-6);
  // Half the nodes, half the failures.
  EXPECT_NEAR(spec.failuresPerHour(8192, 1024),
              spec.failuresPerHour(16384, 2048) / 2, 1e-12);
}

// The hand relation of the first-order model: ETTR ~ 1 - lambda (R + tau/2)
// - delta / tau; the closed form agrees to well under a point.
TEST(Reliability, EttrFollowsTheFirstOrderRelation) {
  ReliabilitySpec spec;
  GoodputInputs in = bigJob();
  GoodputEstimate g = estimate(spec, in);
  double lambda = g.failuresPerHour / 3600;
  double firstOrder = 1 - lambda * (g.restartS + g.intervalS / 2) -
                      g.checkpointStallS / g.intervalS - g.plannedFraction;
  EXPECT_NEAR(g.ettr, firstOrder, 0.005);
  EXPECT_GT(g.ettr, 0.85);
  EXPECT_LT(g.ettr, 0.97);
  // A slower restart costs what the relation says.
  spec.restartS += 600;
  GoodputEstimate slower = estimate(spec, in);
  EXPECT_NEAR(g.ettr - slower.ettr, lambda * 600, 0.005);
}

// An async checkpoint stalls for the copy to host memory only, is
// checkpointed no faster than its write, and trains more.
TEST(Reliability, AsyncCheckpointStallsForTheCopyOnly) {
  ReliabilitySpec spec;
  spec.storageWriteBytesPerS = spec.storageReadBytesPerS = 100e9; // slow
  GoodputInputs in = bigJob();
  GoodputEstimate sync = estimate(spec, in);
  GoodputEstimate async = estimate(spec, in, {true, 0});
  EXPECT_NEAR(sync.checkpointStallS, 57, 0.1);
  EXPECT_NEAR(async.checkpointStallS,
              5.7e12 / 16384 / spec.checkpointCopyBytesPerS, 1e-6);
  EXPECT_GE(async.intervalS, async.checkpointWriteS);
  EXPECT_GT(async.ettr, sync.ettr);
  // Asked to checkpoint faster than the write: refused in one line.
  auto tooOften = estimateGoodput(spec, in, {true, 2});
  ASSERT_FALSE(bool(tooOften));
  std::string msg = llvm::toString(tooOften.takeError());
  EXPECT_NE(msg.find("--checkpoint-every 2"), std::string::npos) << msg;
  // Hosts without room for the pinned copy refuse async.
  in.hostMemoryBytesPerNode = 1e9;
  auto noRoom = estimateGoodput(spec, in, {true, 0});
  ASSERT_FALSE(bool(noRoom));
  EXPECT_NE(llvm::toString(noRoom.takeError()).find("pin"), std::string::npos);
}

// The Monte-Carlo agrees with the closed form over a long run, and the
// same seed draws the same run.
TEST(Reliability, MonteCarloMatchesTheEstimate) {
  ReliabilitySpec spec;
  GoodputInputs in = bigJob();
  GoodputEstimate g = estimate(spec, in);
  auto run = simulateRun(spec, g, {}, {54, 7, 40});
  ASSERT_TRUE(bool(run));
  EXPECT_NEAR(run->ettrP50, g.ettr, 0.01);
  EXPECT_NEAR(run->failuresP50, 419, 60);
  EXPECT_LE(run->ettrP10, run->ettrP50);
  EXPECT_LE(run->ettrP50, run->ettrP90);
  // Every second of the run is accounted for once.
  for (const RunTrial &t : run->trials)
    EXPECT_NEAR(t.trainedS + t.lostWorkS + t.checkpointS + t.downtimeS +
                    t.waitingS + t.plannedS,
                54 * 86400, 1e-3);
  auto again = simulateRun(spec, g, {}, {54, 7, 40});
  ASSERT_TRUE(bool(again));
  for (size_t i = 0; i < run->trials.size(); ++i)
    EXPECT_EQ(run->trials[i].trainedS, again->trials[i].trainedS);
  auto other = simulateRun(spec, g, {}, {54, 8, 40});
  ASSERT_TRUE(bool(other));
  EXPECT_NE(other->trials[0].trainedS, run->trials[0].trainedS);
}

// With nodes out for repair, an empty spare pool makes the job wait; a
// pool as large as the failures in flight does not.
TEST(Reliability, SparePoolDecidesTheWait) {
  ReliabilitySpec spec;
  spec.nodeRepairS = 3 * 86400;
  GoodputInputs in = bigJob();
  GoodputEstimate g = estimate(spec, in);
  auto none = simulateRun(spec, g, {}, {30, 1, 10});
  ASSERT_TRUE(bool(none));
  EXPECT_GT(none->mean.waitingS, 86400);
  spec.spareNodes = 64;
  auto spares = simulateRun(spec, g, {}, {30, 1, 10});
  ASSERT_TRUE(bool(spares));
  EXPECT_EQ(spares->mean.waitingS, 0);
  EXPECT_GT(spares->ettrP50, none->ettrP50 + 0.1);
}

TEST(Reliability, ClusterSpecReadsReliability) {
  const HardwareCatalog &cat = HardwareCatalog::builtin();
  std::string base = R"({"sites": [{"nodes": [{"count": 4,
      "devices_per_node": 8, "device": "H100-SXM"}]}], "reliability": )";
  auto c = parseClusterJson(
      base + R"({"restart_s": 900, "spare_nodes": 2, "source": "ours"}})",
      "c.json", cat);
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_EQ(c->reliability.restartS, 900);
  EXPECT_EQ(c->reliability.spareNodes, 2);
  EXPECT_EQ(c->reliability.source, "ours");
  Cluster copy = *c;
  EXPECT_EQ(copy.reliability.restartS, 900);
  for (const char *bad :
       {R"({"restart_min": 3}})", R"({"detection_s": -1}})",
        R"({"spare_nodes": 1.5}})", R"({"storage_write_bytes_per_s": 0}})",
        R"({"gpu_failures_per_device_hour": "x"}})", R"([1]})"}) {
    auto e = parseClusterJson(base + bad, "c.json", cat);
    ASSERT_FALSE(bool(e)) << bad;
    std::string msg = llvm::toString(e.takeError());
    EXPECT_NE(msg.find("c.json: reliability"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}
