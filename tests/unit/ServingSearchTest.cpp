//===- ServingSearchTest.cpp - the serving configuration search ----------===//
//
// The library's serving search (ServingSearch.h) on built-in models: a
// strategy with every field fixed prices that configuration alone; the
// search covers tp, pp and the replicas that fill the cluster and ranks
// them by the objective; targets turn the figure into goodput and an
// unmeetable target is a one-line error naming the closest; a prefill/
// decode split is searched on two device types; bad requests are one line.
//
//===----------------------------------------------------------------------===//

#include "orrery/CostModel/ServingSearch.h"
#include "TestSupport.h"

namespace orrery {
namespace {

using test::builtinWorkload;

struct Search {
  mlir::MLIRContext ctx;
  Workload w;
  Cluster cluster;
  ServingSearchRequest request;
  Search(const char *model, const char *preset,
         const char *workload = "isl=512,osl=64,requests=64")
      : w(builtinWorkload(ctx, model)), cluster(test::preset(preset)) {
    auto wl = ServingWorkload::parse(workload);
    EXPECT_TRUE(bool(wl));
    request.workload = *wl;
    auto p = ServingPrecision::parse("bf16", "auto");
    EXPECT_TRUE(bool(p));
    request.precision = *p;
  }
  llvm::Expected<ServingSearchResult> run() {
    return searchServing(w, cluster, request);
  }
};

TEST(ServingSearch, AFixedStrategyPricesThatConfigurationAlone) {
  Search s("llama3-8b", "8xH100-SXM");
  s.request.strategy = "tp=2,pp=1,replicas=4";
  auto r = s.run();
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  ASSERT_EQ(r->ranked.size(), 1u);
  const ServingCandidate &c = r->ranked.front();
  EXPECT_EQ(c.p.tp, 2);
  EXPECT_EQ(c.p.replicas, 4);
  EXPECT_EQ(c.devices(), 8);
  EXPECT_EQ(c.strategyText(), "tp=2,pp=1,replicas=4,device=H100-SXM");
  EXPECT_GT(c.result.outputTokensPerS, 0);
}

TEST(ServingSearch, RanksEveryConfigurationByTheObjective) {
  Search s("llama3-8b", "8xH100-SXM");
  auto r = s.run();
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  // tp 1, 2, 4, 8 inside the node, pp over the rest: several candidates,
  // best first by requests per second.
  ASSERT_GT(r->ranked.size(), 4u);
  for (size_t i = 1; i < r->ranked.size(); ++i)
    EXPECT_GE(r->ranked[i - 1].figure("throughput"),
              r->ranked[i].figure("throughput"));
  EXPECT_NE(r->why.find("output tok/s"), std::string::npos) << r->why;
  // The latency objective ranks by the p99 end to end instead.
  s.request.objective = "latency";
  auto l = s.run();
  ASSERT_TRUE(bool(l));
  for (size_t i = 1; i < l->ranked.size(); ++i)
    EXPECT_LE(l->ranked[i - 1].result.e2e.p99S, l->ranked[i].result.e2e.p99S);
}

TEST(ServingSearch, TargetsGiveGoodputAndRefuseWhatNoneMeets) {
  Search s("llama3-8b", "8xH100-SXM");
  s.request.strategy = "tp=1,pp=1,replicas=8";
  auto slo = ServingSlo::parse("ttft_ms=2000,tpot_ms=200");
  ASSERT_TRUE(bool(slo));
  s.request.slo = *slo;
  auto r = s.run();
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  const ServingCandidate &c = r->ranked.front();
  EXPECT_TRUE(c.meets);
  EXPECT_GT(c.goodputRequestsPerS, 0); // offline arrivals: the bisection
  auto tight = ServingSlo::parse("tpot_ms=0.001");
  ASSERT_TRUE(bool(tight));
  s.request.slo = *tight;
  auto none = s.run();
  ASSERT_FALSE(bool(none));
  std::string msg = llvm::toString(none.takeError());
  EXPECT_NE(msg.find("no configuration meets the SLO; the closest, H100-SXM"),
            std::string::npos)
      << msg;
}

TEST(ServingSearch, SplitsPrefillAndDecodeOverTwoDeviceTypes) {
  Search s("llama3-8b", "8xH100-SXM");
  std::string spec = test::sourceDir() + "/bench/clusters/h100-l40s.json";
  auto c = loadCluster(spec, HardwareCatalog::builtin());
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  s.cluster = std::move(*c);
  s.request.strategy = "prefill=H100-SXM:2,decode=L40S:1";
  auto r = s.run();
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  ASSERT_EQ(r->ranked.size(), 1u);
  const ServingCandidate &split = r->ranked.front();
  ASSERT_TRUE(split.decode.has_value());
  EXPECT_EQ(split.p.tp, 2);
  EXPECT_EQ(split.decode->tp, 1);
  EXPECT_EQ(split.strategyText(), "prefill=H100-SXM:2,decode=L40S:1");
}

TEST(ServingSearch, BadRequestsAreOneLineErrors) {
  Search s("llama3-8b", "8xH100-SXM");
  auto expectError = [&](const std::string &contains) {
    auto r = s.run();
    ASSERT_FALSE(bool(r)) << contains;
    std::string msg = llvm::toString(r.takeError());
    EXPECT_NE(msg.find(contains), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  };
  s.request.objective = "speed";
  expectError("--objective speed: expected throughput, cost or latency");
  s.request.objective = "cost";
  expectError("--objective cost: the cluster states no price");
  s.request.objective = "throughput";
  s.request.strategy = "tp=2,pp=1,replicas=8";
  expectError("need 16 H100-SXM, the cluster has 8");
  s.request.strategy = "device=A100-80G";
  expectError("--strategy device=A100-80G: the cluster has no such device");
  s.request.strategy = "tp=2,warp=3";
  expectError("--strategy: unknown field 'warp'");
  EXPECT_FALSE(bool(ServingSlo::parse("ttft_ms=-1")));
  s.request.strategy = "";
  s.request.engine = ServingEngine::TensorRtLlm;
  s.cluster = test::preset("8xMI300X");
  expectError("--engine trtllm: TensorRT-LLM runs on NVIDIA GPUs only");
}

} // namespace
} // namespace orrery
