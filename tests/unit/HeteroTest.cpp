//===- HeteroTest.cpp - mixed clusters: simulation and search properties -===//
#include "orrery/CostModel/Hetero.h"
#include "orrery/Search/HeteroPlanner.h"
#include "orrery/Search/Planner.h"

#include <nlohmann/json.hpp>
#include <set>

#include <gtest/gtest.h>

using namespace orrery;

namespace {

/// `layers` identical transformer-like layers (one big tensor-parallel
/// matmul each), plus a lighter first layer, 1 sample per batch.
Workload model(int layers, double flops, int64_t params, int64_t actBytes) {
  Workload w;
  LayerKind embed, k;
  for (LayerKind *x : {&embed, &k}) {
    bool body = x == &k;
    x->name = body ? "layer" : "embedding";
    x->count = body ? layers : 1;
    x->parameters = body ? params : params / 2;
    x->forwardFlops = int64_t(body ? flops : flops / 10);
    x->backwardFlops = 2 * x->forwardFlops;
    OpCost op;
    op.name = "orrery.matmul";
    op.forwardFlops = x->forwardFlops;
    op.backwardFlops = x->backwardFlops;
    op.contraction = true;
    op.tensorParallel = true;
    x->ops = {op};
    x->savedShardedBytes = actBytes;
    x->savedActivationBytes = actBytes;
    x->inputBytes = actBytes / 10;
    x->outputBytes = actBytes / 10;
  }
  w.kinds = {embed, k};
  w.layers = {{0, 1}, {1, layers}};
  w.batchSize = 1;
  w.tokensPerSample = 2048;
  return w;
}

Cluster cluster(const std::string &json) {
  auto c = parseClusterJson(json, "test.json", HardwareCatalog::builtin());
  EXPECT_TRUE(bool(c)) << (c ? "" : llvm::toString(c.takeError()));
  return std::move(*c);
}

const char *kMixed = R"({"name": "mixed", "sites": [{"name": "dc", "nodes": [
  {"count": 2, "device": "A100-80G", "devices_per_node": 8},
  {"count": 4, "device": "V100-32G", "devices_per_node": 8},
  {"count": 1, "device": "H100-SXM", "devices_per_node": 8}]}]})";

const char *kTwoSites = R"({"name": "two sites", "sites": [
  {"name": "east", "nodes": [{"count": 4, "device": "A100-80G",
                              "price_usd_per_device_hour": 2}]},
  {"name": "west", "nodes": [{"count": 4, "device": "A100-80G",
                              "price_usd_per_device_hour": 2}]}],
  "inter_site_links": [{"sites": ["east", "west"], "link": "WAN-100G",
                        "egress_usd_per_gb": 0.05}]})";

// 1.3B-like: 24 layers of 54M parameters, 30 GFLOP per sample-layer.
Workload gptLike() { return model(24, 30e9 * 2048 / 2048, 54'000'000, 400'000'000); }

TEST(Hetero, OnePoolGroupMatchesTheHomogeneousSimulator) {
  Workload w = gptLike();
  auto c = parseClusterPreset("8xA100-80G", HardwareCatalog::builtin());
  ASSERT_TRUE(bool(c));
  HeteroStrategy h;
  h.globalBatch = 64;
  ReplicaGroup g;
  g.replicas = 4;
  g.microBatch = 2;
  g.microBatches.assign(4, 8);
  g.stages = {{0, 1, 12, {}}, {0, 1, 13, {}}};
  h.groups = {g};
  auto r = simulateHetero(w, *c, h);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  auto s = parseStrategy("tp=1,pp=2,dp=4,mbs=2,gbs=64,zero=1");
  ASSERT_TRUE(bool(s));
  s->stageLayers = {12, 13};
  auto ref = simulateStep(w, *c, *s);
  ASSERT_TRUE(bool(ref));
  EXPECT_NEAR(r->stepS, ref->stepS, 1e-9 * ref->stepS);
  EXPECT_EQ(r->devicesUsed, 8);
  EXPECT_EQ(r->crossGroupSyncS, 0);
}

TEST(Hetero, FasterPoolTakingMoreOfTheBatchIsFaster) {
  Workload w = gptLike();
  Cluster c = cluster(kMixed);
  auto pools = clusterPools(c);
  ASSERT_EQ(pools.size(), 3u);
  EXPECT_EQ(pools[2].name, "dc/H100-SXM");
  auto plan = [&](int64_t a100, int64_t h100) {
    HeteroStrategy h;
    h.globalBatch = (a100 * 2 + h100) * 4;
    ReplicaGroup ga, gh;
    ga.replicas = 2; // A100: 2 replicas of tp8
    ga.microBatch = 4;
    ga.microBatches.assign(2, a100);
    ga.stages = {{0, 8, 25, {}}};
    gh.replicas = 1;
    gh.microBatch = 4;
    gh.microBatches = {h100};
    gh.stages = {{2, 8, 25, {}}};
    h.groups = {ga, gh};
    auto r = simulateHetero(w, c, h);
    EXPECT_TRUE(bool(r)) << (r ? "" : llvm::toString(r.takeError()));
    return *r;
  };
  // 48 micro-batches: even (16 each) against more for the H100 replica.
  HeteroResult even = plan(16, 16), skewed = plan(13, 22);
  // Both groups split the model alike (one stage of tp 8): their three
  // replicas reduce the gradients in one collective, in each group's step,
  // none after.
  EXPECT_EQ(even.crossGroupSyncS, 0);
  EXPECT_GT(even.groups[0].exposedDpCommS, 0);
  EXPECT_GT(even.groups[1].exposedDpCommS, 0);
  EXPECT_LT(skewed.stepS, even.stepS);
  // The slower groups set the step: the A100 group is the slowest when even.
  EXPECT_GT(even.groups[0].stepS, even.groups[1].stepS);
}

TEST(Hetero, InvalidStrategiesNameTheField) {
  Workload w = gptLike();
  Cluster c = cluster(kMixed);
  HeteroStrategy h;
  h.globalBatch = 8;
  ReplicaGroup g;
  g.replicas = 1;
  g.microBatch = 1;
  g.microBatches = {8};
  g.stages = {{0, 8, 25, {}}};
  h.groups = {g};
  EXPECT_FALSE(bool(placeDevices(h, w, c)));
  auto expectError = [&](HeteroStrategy bad, const std::string &text) {
    llvm::Error e = placeDevices(bad, w, c);
    ASSERT_TRUE(bool(e));
    std::string msg = llvm::toString(std::move(e));
    EXPECT_NE(msg.find(text), std::string::npos) << msg;
  };
  HeteroStrategy ok = h;
  ASSERT_FALSE(bool(placeDevices(ok, w, c)));
  HeteroStrategy shares = h;
  shares.globalBatch = 9;
  expectError(shares, "shares sum to 8 samples, the global batch is 9");
  HeteroStrategy layers = h;
  layers.groups[0].stages[0].layers = 24;
  expectError(layers, "the layers sum to 24, the model has 25");
  HeteroStrategy tp = h;
  tp.groups[0].stages[0].tp = 3;
  expectError(tp, "replica_groups[0].stages[0].tp: 3 must divide the 8");
  HeteroStrategy many = h;
  many.groups[0].replicas = 3; // 24 H100 in a pool of 8... of A100: 16
  many.groups[0].microBatches = {3, 3, 2};
  expectError(many, "needs 24 devices of dc/A100-80G but only 16 are left");
  HeteroStrategy pool = h;
  pool.groups[0].stages[0].pool = 7;
  expectError(pool, "stages[0].pool: no pool 7 (the cluster has 3)");
}

/// Checks the plan properties the issue asks for.
void expectSound(const HeteroResult &r, const Workload &w, const Cluster &c,
                 int64_t gbs) {
  ASSERT_TRUE(r.fits) << r.doesNotFit;
  int64_t samples = 0;
  for (size_t g = 0; g < r.groups.size(); ++g) {
    const ReplicaGroup &rg = r.strategy.groups[g];
    samples += rg.samples();
    // Every layer in exactly one stage: contiguous, in order, all of them.
    int next = 0;
    for (const StageReport &st : r.groups[g].stages) {
      EXPECT_EQ(st.firstLayer, next);
      EXPECT_GE(st.numLayers, 1);
      next += st.numLayers;
      // Memory fits on every device of the stage's type.
      EXPECT_LE(st.memory.total(), st.capacityBytes) << st.device;
    }
    EXPECT_EQ(next, w.totalLayers());
    // Tensor-parallel groups stay inside one node.
    for (const HeteroStage &st : rg.stages)
      for (size_t d = 0; d < st.devices.size(); d += st.tp)
        for (int t = 1; t < st.tp; ++t)
          EXPECT_EQ(c.devices()[st.devices[d]].node,
                    c.devices()[st.devices[d + t]].node);
  }
  EXPECT_EQ(samples, gbs);
}

TEST(HeteroPlanner, PlansAreSoundAndBeatTheBaselines) {
  Workload w = gptLike();
  Cluster c = cluster(kMixed);
  PlanOptions o;
  o.globalBatch = 512;
  o.topK = 3;
  auto r = searchHeteroPlans(w, c, o);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  for (const HeteroResult &x : r->top)
    expectSound(x, w, c, 512);
  double best = r->top.front().stepS;
  // Only the fastest type; every device alike.
  HeteroSearchScope fast, uniform;
  fast.pools = {false, false, true};
  uniform.uniform = true;
  auto f = searchHeteroPlans(w, c, o, fast);
  auto u = searchHeteroPlans(w, c, o, uniform);
  ASSERT_TRUE(bool(f) && bool(u));
  expectSound(f->top.front(), w, c, 512);
  expectSound(u->top.front(), w, c, 512);
  EXPECT_EQ(f->top.front().devicesUsed, 8);
  EXPECT_LT(best, f->top.front().stepS);
  EXPECT_LT(best, u->top.front().stepS);
  // Deterministic: the same search gives the same plan.
  auto again = searchHeteroPlans(w, c, o);
  ASSERT_TRUE(bool(again));
  EXPECT_EQ(again->top.front().strategy.str(again->pools),
            r->top.front().strategy.str(r->pools));
  EXPECT_EQ(again->top.front().stepS, best);
}

TEST(HeteroPlanner, OneMoreFasterDeviceNeverSlowsTheBestPlan) {
  Workload w = gptLike();
  PlanOptions o;
  o.globalBatch = 256;
  double before = 0;
  for (int extra = 0; extra <= 2; ++extra) {
    std::string json = R"({"name": "grow", "sites": [{"name": "dc", "nodes": [
      {"count": 1, "device": "V100-32G", "devices_per_node": 8},
      {"count": 1, "device": "A100-80G", "devices_per_node": 4})";
    // Each step adds one device strictly faster than any already there.
    if (extra >= 1)
      json += R"(, {"count": 1, "device": "H100-SXM", "devices_per_node": 1})";
    if (extra >= 2)
      json += R"(, {"count": 1, "device": "B200", "devices_per_node": 1})";
    json += "]}]}";
    Cluster c = cluster(json);
    auto r = searchHeteroPlans(w, c, o);
    ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
    expectSound(r->top.front(), w, c, 256);
    double step = r->top.front().stepS;
    if (extra > 0) {
      EXPECT_LE(step, before * (1 + 1e-12)) << "with " << extra << " more";
    }
    before = step;
  }
}

TEST(Hetero, WanBytesAndEgressOfTwoSites) {
  Workload w = gptLike();
  Cluster c = cluster(kTwoSites);
  double grad = double(w.parameters()) * Assumptions().gradBytesPerParam;
  // One replica group per site: the gradient all-reduce between the two
  // groups is a two-rank ring, one edge each way over the WAN, each edge
  // carrying 2(G-1)/G = 1 times the gradients.
  HeteroStrategy bySite;
  bySite.globalBatch = 64;
  for (int site = 0; site < 2; ++site) {
    ReplicaGroup g;
    g.replicas = 4;
    g.microBatch = 1;
    g.microBatches.assign(4, 8);
    g.stages = {{site, 8, 25, {}}};
    bySite.groups.push_back(g);
  }
  auto r = simulateHetero(w, c, bySite);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_NEAR(r->wanBytesPerStep, 2 * grad, 1e-9 * grad);
  EXPECT_NEAR(r->wanUsdPerStep, 2 * grad / 1e9 * 0.05, 1e-12);
  // The WAN (12.5 GB/s at 90%) bounds the reduction across sites.
  EXPECT_GE(r->crossGroupSyncS, grad / (12.5e9 * 0.9));
  // A pipeline across the sites instead: activations forward and their
  // gradients back cross the WAN once per micro-batch and replica.
  HeteroStrategy split;
  split.globalBatch = 64;
  ReplicaGroup g;
  g.replicas = 4;
  g.microBatch = 1;
  g.microBatches.assign(4, 16);
  g.stages = {{0, 8, 13, {}}, {1, 8, 12, {}}};
  split.groups = {g};
  auto p = simulateHetero(w, c, split);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  double boundary = w.kinds[1].outputBytes; // per sample, whole tensor
  EXPECT_NEAR(p->wanBytesPerStep, 2 * boundary * 64, 1e-9 * boundary * 64);
  EXPECT_EQ(p->crossGroupSyncS, 0);
}

TEST(HeteroPlanner, TwoSitesKeepTensorGroupsInsideAndPriceTheWan) {
  // 24 layers of 6B parameters: 2.6 TB of weights, gradients and Adam
  // state, more than one site's 32 A100-80G hold: the plan must use both.
  Workload w = model(24, 30e9, 6'000'000'000, 400'000'000);
  Cluster c = cluster(kTwoSites);
  PlanOptions o;
  o.globalBatch = 256;
  auto r = searchHeteroPlans(w, c, o);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  const HeteroResult &b = r->top.front();
  expectSound(b, w, c, 256); // tensor groups inside a node, so a site
  bool east = false, west = false;
  for (const ReplicaGroup &g : b.strategy.groups)
    for (const HeteroStage &st : g.stages)
      (r->pools[st.pool].site == 0 ? east : west) = true;
  ASSERT_TRUE(east && west);
  EXPECT_GT(b.wanBytesPerStep, 0);
  EXPECT_NEAR(b.wanUsdPerStep, b.wanBytesPerStep / 1e9 * 0.05,
              1e-9 * b.wanUsdPerStep);
  EXPECT_GT(b.costUsd, b.wanUsdPerStep);
}

TEST(HeteroPlanner, CostAndEnergyObjectivesUsePerTypePricesAndPower) {
  Workload w = gptLike();
  // H100 at 8 USD/h, A100 at 1 USD/h: the cheapest plan is not the fastest.
  Cluster c = cluster(R"({"name": "priced", "sites": [{"name": "dc", "nodes": [
    {"count": 2, "device": "A100-80G", "price_usd_per_device_hour": 1},
    {"count": 1, "device": "H100-SXM", "price_usd_per_device_hour": 8}]}]})");
  PlanOptions o;
  o.globalBatch = 256;
  o.topK = 3;
  auto fast = searchHeteroPlans(w, c, o);
  o.objective = Objective::Cost;
  auto cheap = searchHeteroPlans(w, c, o);
  o.objective = Objective::Energy;
  auto frugal = searchHeteroPlans(w, c, o);
  ASSERT_TRUE(bool(fast) && bool(cheap) && bool(frugal));
  const HeteroResult &f = fast->top.front(), &ch = cheap->top.front(),
                     &fr = frugal->top.front();
  EXPECT_GT(ch.costUsd, 0);
  EXPECT_LE(ch.costUsd, f.costUsd);
  EXPECT_LE(f.stepS, ch.stepS);
  EXPECT_LE(fr.energyJ, f.energyJ);
  for (const HeteroResult &x : cheap->top)
    EXPECT_LE(ch.costUsd, x.costUsd);
  // Cost is the used devices' price times the step.
  double perHour = 0;
  for (const ReplicaGroup &g : ch.strategy.groups)
    for (const HeteroStage &st : g.stages)
      perHour += st.devices.size() *
                 cheap->pools[st.pool].nodes->priceUsdPerDeviceHour;
  EXPECT_NEAR(ch.costUsd, perHour * ch.stepS / 3600, 1e-9 * ch.costUsd);
}

TEST(HeteroPlanner, TraceHasOneTrackPerStage) {
  Workload w = gptLike();
  Cluster c = cluster(kMixed);
  PlanOptions o;
  o.globalBatch = 128;
  auto r = searchHeteroPlans(w, c, o);
  ASSERT_TRUE(bool(r));
  auto traced = simulateHetero(w, c, r->top.front().strategy, {}, true);
  ASSERT_TRUE(bool(traced));
  auto j = nlohmann::json::parse(heteroTraceJson(*traced, r->pools));
  std::set<int> tracks, named;
  size_t stages = 0;
  for (const auto &g : traced->groups)
    stages += g.stages.size();
  for (const auto &e : j["traceEvents"]) {
    if (e["ph"] == "M")
      named.insert(e["tid"].get<int>());
    else
      tracks.insert(e["tid"].get<int>());
  }
  EXPECT_EQ(named.size(), stages);
  EXPECT_EQ(tracks.size(), stages);
}

TEST(HeteroPlanner, Zero3WhenNothingFitsWithoutIt) {
  // An 80B-parameter layer (and a 40B embedding) on two sites of 32
  // A100-80G: at tp=8 its weights and fp32 gradients alone take 60 GB a
  // device, and the optimizer state sharded over the at most 4 replicas
  // another 30 GB; only sharding weights and gradients too (ZeRO-3) fits.
  Workload w = model(1, 30e9, 80'000'000'000, 100'000'000);
  Cluster c = cluster(kTwoSites);
  PlanOptions o;
  o.globalBatch = 64;
  auto r = searchHeteroPlans(w, c, o);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(r->top.front().strategy.zeroStage, 3)
      << r->top.front().strategy.str(r->pools);
  expectSound(r->top.front(), w, c, 64);
}

TEST(HeteroPlanner, ManyPoolsPlanSoundlyAndBeatTheFastestAlone) {
  // Six device types: past four pools the search keeps to small subsets
  // and speed-ordered prefixes; the plan is still sound, and no slower than
  // the fastest type alone.
  Workload w = gptLike();
  Cluster c = cluster(R"({"name": "six", "sites": [{"name": "dc", "nodes": [
    {"count": 1, "device": "H100-SXM"}, {"count": 1, "device": "A100-80G"},
    {"count": 1, "device": "A100-40G"}, {"count": 1, "device": "V100-32G"},
    {"count": 2, "device": "L40S", "devices_per_node": 4},
    {"count": 2, "device": "A10G", "devices_per_node": 4}]}]})");
  PlanOptions o;
  o.globalBatch = 256;
  auto r = searchHeteroPlans(w, c, o);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  expectSound(r->top.front(), w, c, 256);
  HeteroSearchScope fast;
  fast.pools = {true, false, false, false, false, false};
  auto f = searchHeteroPlans(w, c, o, fast);
  ASSERT_TRUE(bool(f));
  EXPECT_LE(r->top.front().stepS, f->top.front().stepS);
}

TEST(HeteroPlanner, NothingFitsNamesTheShortfall) {
  // 24 layers of 20B parameters: 18 bytes each is far beyond the cluster.
  Workload w = model(24, 30e9, 20'000'000'000, 400'000'000);
  Cluster c = cluster(kMixed);
  PlanOptions o;
  o.globalBatch = 64;
  auto r = searchHeteroPlans(w, c, o);
  ASSERT_FALSE(bool(r));
  std::string msg = llvm::toString(r.takeError());
  EXPECT_NE(msg.find("fits on the cluster under no strategy"),
            std::string::npos)
      << msg;
}

} // namespace

// Under a V a device runs chunks c and 2pp-1-c: a split that evens the
// chunks leaves the pairs uneven when one layer (a large head) outweighs a
// chunk; the folded balance evens the pairs. The embedding (0.1 s), 48
// layers of 1 s and a 9 s head, pp 4 (8 chunks): 57.1 s, 14.3 s a device
// at best.
TEST(Planner, FoldedBalanceEvensTheVsPairs) {
  std::vector<double> seconds(50, 1.0);
  seconds.front() = 0.1;
  seconds.back() = 9.0;
  auto worstPair = [&](const std::vector<int> &r) {
    std::vector<double> chunk;
    size_t at = 0;
    for (int n : r) {
      double sum = 0;
      for (int i = 0; i < n; ++i)
        sum += seconds[at++];
      chunk.push_back(sum);
    }
    double worst = 0;
    for (size_t c = 0; c < chunk.size() / 2; ++c)
      worst = std::max(worst, chunk[c] + chunk[chunk.size() - 1 - c]);
    return worst;
  };
  std::vector<int> even = balanceLayers(seconds, 8);
  std::vector<int> folded = balanceFoldedLayers(seconds, 8);
  ASSERT_EQ(folded.size(), 8u);
  int layers = 0;
  for (int n : folded) {
    EXPECT_GE(n, 1);
    layers += n;
  }
  EXPECT_EQ(layers, 50);
  EXPECT_LT(worstPair(folded), worstPair(even));
  EXPECT_LE(worstPair(folded), 57.1 / 4 + 1.0); // within a layer of even
}
