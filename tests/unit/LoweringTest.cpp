//===- LoweringTest.cpp - per-rank programs and their static check -------===//
//
// Every generated plan (schedules, interleaving, uneven stages, tp, cp,
// ZeRO stages, recompute, experts, heterogeneous groups over sites) lowers
// to a program set that passes the check; its instructions price to the
// simulated stage; hand-broken programs fail with the rank and the
// instruction named.
//
//===----------------------------------------------------------------------===//
#include "orrery/CostModel/Lowering.h"
#include "TestSupport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

using namespace orrery;

namespace {

using test::preset;

Assumptions fusedAssumptions(const Workload &w) {
  Assumptions a;
  a.fusion = w.kernels;
  return a;
}

/// Where rank r's program in `part` (a partial lowering) differs from the
/// whole set's, group members compared by rank (their ids differ); empty
/// when it does not.
std::string differs(const ProgramSet &whole, const ProgramSet &part, int r) {
  const Program &a = whole.ranks[r], &b = part.ranks[r];
  if (!b.lowered)
    return "not lowered";
  if (a.code.size() != b.code.size() || a.staticBytes != b.staticBytes ||
      a.stage != b.stage || a.tpRank != b.tpRank || a.dpRank != b.dpRank)
    return "another program";
  for (size_t i = 0; i < a.code.size(); ++i) {
    const Instruction &x = a.code[i], &y = b.code[i];
    bool same = x.kind == y.kind && x.stream == y.stream && x.name == y.name &&
                x.span == y.span && x.bytes == y.bytes && x.peer == y.peer &&
                x.tag == y.tag && x.deps == y.deps &&
                x.predictedS == y.predictedS && x.collective == y.collective &&
                (x.group < 0) == (y.group < 0) &&
                (x.group < 0 || whole.groups[x.group] == part.groups[y.group]);
    if (!same)
      return "instruction " + std::to_string(i) + " differs";
  }
  return "";
}

/// Each listed rank lowered alone (with the peers it matches) is the
/// whole set's rank, passes checkRank, and so does every rank of the whole
/// set; `lower` lowers a selection.
template <typename Lower>
void expectRanksLowerAlone(const ProgramSet &whole, Lower lower,
                           const std::vector<int> &ranks,
                           const std::string &what) {
  for (int r = 0; r < whole.worldSize; ++r) {
    llvm::Error e = checkRank(whole, r);
    EXPECT_FALSE(bool(e)) << what << ": " << llvm::toString(std::move(e));
  }
  for (int r : ranks) {
    auto part = lower(RankSelection{{r}, true});
    ASSERT_TRUE(bool(part)) << what << ": " << llvm::toString(part.takeError());
    // Only the rank and the peers it matches.
    int lowered = 0;
    for (const Program &p : part->ranks)
      lowered += p.lowered;
    EXPECT_EQ(lowered, 1 + int(peersToMatch(whole, r).size())) << what;
    EXPECT_EQ(differs(whole, *part, r), "") << what << ", rank " << r;
    llvm::Error e = checkRank(*part, r);
    EXPECT_FALSE(bool(e)) << what << ", rank " << r << ": "
                          << llvm::toString(std::move(e));
  }
}

/// Lowers and checks; false (with the reason in `why`) when the strategy
/// does not apply to the model or cluster.
bool lowerAndCheck(const Workload &w, const Cluster &c, const std::string &st,
                   std::string &why, ProgramSet *out = nullptr) {
  auto s = parseStrategy(st);
  EXPECT_TRUE(bool(s)) << st;
  if (!s)
    return false;
  auto set = lowerStep(w, c, *s, fusedAssumptions(w));
  if (!set) {
    why = llvm::toString(set.takeError());
    return false;
  }
  llvm::Error e = checkPrograms(*set);
  EXPECT_FALSE(bool(e)) << st << ": " << llvm::toString(std::move(e));
  expectRanksLowerAlone(
      *set,
      [&](const RankSelection &only) {
        return lowerStep(w, c, *s, fusedAssumptions(w), only);
      },
      {0, set->worldSize - 1}, st);
  if (out)
    *out = std::move(*set);
  return true;
}

TEST(Lowering, EveryGeneratedPlanPassesTheCheck) {
  mlir::MLIRContext ctx;
  Workload w = test::tinyGpt(ctx, KernelFusion::Fused);
  Cluster c8 = preset("8xA100-80G"), c2x4 = preset("2x4xA100-80G");
  int lowered = 0;
  const char *schedules[] = {
      "schedule=gpipe", "schedule=1f1b", "schedule=interleaved,vpp=2",
      "schedule=zb-h1", "schedule=zb-v", "schedule=dualpipev"};
  const char *extras[] = {"zero=0",
                          "zero=1,recompute=selective",
                          "zero=3,recompute=full",
                          "zero=2,overlap=none",
                          "zero=1,sp=1,overlap=grad+param+tp+p2p",
                          "zero=1,sp=1,recompute=op"};
  for (const Cluster *c : {&c8, &c2x4})
    for (int tp : {1, 2})
      for (int pp : {1, 2, 4})
        for (int cp : {1, 2})
          for (const char *sched : schedules)
            for (const char *extra : extras)
              for (int mbs : {1, 2}) {
                int dp = 8 / (tp * pp * cp);
                if (dp < 1)
                  continue;
                std::string st =
                    "tp=" + std::to_string(tp) + ",pp=" + std::to_string(pp) +
                    ",cp=" + std::to_string(cp) + ",dp=" + std::to_string(dp) +
                    ",mbs=" + std::to_string(mbs) +
                    ",gbs=" + std::to_string(mbs * dp * 4) + "," + sched + "," +
                    extra;
                std::string why;
                if (lowerAndCheck(w, *c, st, why))
                  ++lowered;
              }
  // Uneven stages and the all-to-all context exchange.
  for (const char *st :
       {"pp=2,dp=4,mbs=1,gbs=16,layers=3:1",
        "pp=2,dp=4,mbs=1,gbs=16,layers=1:3,schedule=gpipe",
        "pp=4,dp=2,mbs=1,gbs=8,layers=1:1:1:1",
        "tp=2,pp=2,dp=2,mbs=1,gbs=8,layers=3:1",
        "cp=2,dp=4,mbs=1,gbs=8,cp_comm=all-to-all",
        "tp=2,cp=2,dp=2,mbs=2,gbs=8,cp_comm=all-to-all,recompute=selective"}) {
    std::string why;
    EXPECT_TRUE(lowerAndCheck(w, c8, st, why)) << st << ": " << why;
    ++lowered;
  }
  // Experts split over ep ranks, with their all-to-alls.
  Workload moe = test::moeModel(4, 100'000'000, 64 << 20);
  for (const char *st :
       {"ep=2,dp=8,mbs=1,gbs=16", "ep=4,dp=8,mbs=1,gbs=16",
        "ep=8,dp=8,mbs=1,gbs=16,zero=1", "pp=2,ep=4,dp=4,mbs=1,gbs=16,zero=1",
        // Folded experts: ep of the tp x dp ranks.
        "tp=2,sp=1,ep=8,etp=1,dp=4,mbs=2,gbs=16,zero=1",
        "tp=2,sp=1,pp=2,ep=4,etp=1,dp=2,mbs=2,gbs=16"}) {
    std::string why;
    ProgramSet set;
    EXPECT_TRUE(lowerAndCheck(moe, preset("2x4xA100-80G"), st, why, &set))
        << st << ": " << why;
    ++lowered;
    int a2a = 0;
    for (const Instruction &in : set.ranks[0].code)
      a2a += in.kind == InstrKind::Collective &&
             in.collective == CollectiveKind::AllToAll;
    EXPECT_GT(a2a, 0) << st;
  }
  EXPECT_GE(lowered, 200);
}

TEST(Lowering, HeterogeneousGroupsAndSitesPassTheCheck) {
  mlir::MLIRContext ctx;
  Workload w = test::tinyGpt(ctx, KernelFusion::Fused);
  auto c = parseClusterJson(
      R"({"name": "mixed", "sites": [
        {"name": "east", "nodes": [
          {"count": 1, "device": "A100-80G", "devices_per_node": 4},
          {"count": 1, "device": "H100-SXM", "devices_per_node": 4}]},
        {"name": "west", "nodes": [
          {"count": 1, "device": "A100-80G", "devices_per_node": 4}]}],
        "inter_site_links": [{"sites": ["east", "west"], "link": "WAN-100G"}]})",
      "mixed.json", HardwareCatalog::builtin());
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  int lowered = 0;
  for (int variant = 0; variant < 6; ++variant) {
    HeteroStrategy h;
    ReplicaGroup a, b;
    // Group a: A100 (tp 2) then H100 (tp 1 or 2), uneven layers; group b
    // on the other site's A100s, one pipeline stage.
    a.replicas = 2;
    a.microBatch = 1;
    a.microBatches = {int64_t(3 + variant % 2), 3};
    a.stages = {{0, 2, 1 + variant % 3, {}},
                {1, variant % 2 ? 2 : 1, 3 - variant % 3, {}}};
    a.recompute = variant >= 3 ? Recompute::Full : Recompute::None;
    b.replicas = 2;
    b.microBatch = 1;
    b.microBatches = {2, 2};
    b.stages = {{2, 2, 4, {}}};
    h.groups = {a, b};
    h.globalBatch = a.samples() + b.samples();
    h.zeroStage = variant % 2;
    auto set = lowerHetero(w, *c, h, fusedAssumptions(w));
    ASSERT_TRUE(bool(set)) << variant << ": "
                           << llvm::toString(set.takeError());
    llvm::Error e = checkPrograms(*set);
    EXPECT_FALSE(bool(e)) << variant << ": " << llvm::toString(std::move(e));
    std::vector<int> every(size_t(set->worldSize));
    for (int r = 0; r < set->worldSize; ++r)
      every[r] = r;
    expectRanksLowerAlone(
        *set,
        [&](const RankSelection &only) {
          return lowerHetero(w, *c, h, fusedAssumptions(w), only);
        },
        every, "variant " + std::to_string(variant));
    // Across groups the gradients meet on the rings of Hetero.cpp.
    bool cross = false;
    for (size_t g = 0; g < set->groupNames.size(); ++g)
      cross |= set->groupNames[g] == "cross-group";
    EXPECT_TRUE(cross);
    ++lowered;
  }
  EXPECT_EQ(lowered, 6);
}

TEST(Lowering, AlignedGroupsReduceInOneDataParallelGroup) {
  // Two replica groups that split the model alike on different device
  // types of one site: each stage's gradients are reduced by one group of
  // all four replicas (as the simulator prices it), none across groups.
  mlir::MLIRContext ctx;
  Workload w = test::tinyGpt(ctx, KernelFusion::Fused);
  auto c = parseClusterJson(
      R"({"name": "two-types", "sites": [{"name": "dc", "nodes": [
          {"count": 1, "device": "A100-80G", "devices_per_node": 4},
          {"count": 1, "device": "H100-SXM", "devices_per_node": 4}]}]})",
      "two-types.json", HardwareCatalog::builtin());
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  for (int zero : {0, 1}) {
    HeteroStrategy h;
    ReplicaGroup a, b;
    a.replicas = b.replicas = 2;
    a.microBatch = b.microBatch = 1;
    a.microBatches = {3, 3};
    b.microBatches = {4, 4};
    a.stages = {{0, 1, 2, {}}, {0, 1, 2, {}}};
    b.stages = {{1, 1, 2, {}}, {1, 1, 2, {}}};
    h.groups = {a, b};
    h.globalBatch = a.samples() + b.samples();
    h.zeroStage = zero;
    auto r = simulateHetero(w, *c, h, fusedAssumptions(w));
    ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
    EXPECT_EQ(r->crossGroupSyncS, 0);
    auto set = lowerHetero(w, *c, h, fusedAssumptions(w));
    ASSERT_TRUE(bool(set)) << llvm::toString(set.takeError());
    llvm::Error e = checkPrograms(*set);
    EXPECT_FALSE(bool(e)) << llvm::toString(std::move(e));
    int dpGroups = 0;
    for (size_t g = 0; g < set->groupNames.size(); ++g) {
      EXPECT_NE(set->groupNames[g], "cross-group");
      if (set->groupNames[g] == "dp") {
        EXPECT_EQ(set->groups[g].size(), 4u);
        ++dpGroups;
      }
    }
    EXPECT_EQ(dpGroups, 2); // one per stage
  }
}

TEST(Lowering, PipelineSendsShareTheNodeCardWithTheirStageOnly) {
  // Nodes of four GPUs and one card each (AMP's V100 + T4 cluster): a
  // stage's lone rank sends over the whole card, four replicas' ranks that
  // cross together over a quarter of it each.
  mlir::MLIRContext ctx;
  Workload w = test::tinyGpt(ctx, KernelFusion::Fused);
  auto c = parseClusterJson(
      R"({"name": "one-card", "sites": [{"name": "dc", "nodes": [
          {"count": 1, "device": "V100-16G", "devices_per_node": 4,
           "nic": {"link": "Eth-10G", "count": 1}},
          {"count": 1, "device": "T4", "devices_per_node": 4,
           "nic": {"link": "Eth-10G", "count": 1}}]}]})",
      "one-card.json", HardwareCatalog::builtin());
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  auto sendSeconds = [&](int replicas) {
    HeteroStrategy h;
    ReplicaGroup g;
    g.replicas = replicas;
    g.microBatch = 1;
    g.microBatches.assign(replicas, 2);
    g.stages = {{0, 1, 2, {}}, {1, 1, 2, {}}};
    h.groups = {g};
    h.globalBatch = g.samples();
    h.precision = Precision::FP16;
    auto set = lowerHetero(w, *c, h, fusedAssumptions(w));
    EXPECT_TRUE(bool(set)) << llvm::toString(set.takeError());
    for (const Instruction &in : set->ranks[0].code)
      if (in.kind == InstrKind::Send)
        return std::pair<double, double>{in.bytes, in.predictedS};
    return std::pair<double, double>{0, 0};
  };
  const LinkSpec &eth = *HardwareCatalog::builtin().link("Eth-10G");
  GroupShape g;
  g.ranks = 2;
  g.ranksPerNode = 1;
  g.nic = &eth;
  for (int replicas : {1, 4}) {
    auto [bytes, seconds] = sendSeconds(replicas);
    ASSERT_GT(bytes, 0);
    g.nicSharePerRank = 1.0 / replicas;
    EXPECT_NEAR(seconds, collectiveTime(CollectiveKind::SendRecv, bytes, g),
                1e-12)
        << replicas;
  }
}

/// The instructions of micro-batch 0's tasks on each stage, compute and
/// tensor-parallel communication, against the simulator's per micro-batch
/// stage times.
TEST(Lowering, InstructionsPriceToTheSimulatedStage) {
  mlir::MLIRContext ctx;
  Workload w = test::tinyGpt(ctx, KernelFusion::Fused, 1);
  Cluster c = preset("8xA100-80G");
  for (const char *st :
       {"tp=2,pp=2,dp=2,mbs=2,gbs=16", "pp=4,dp=2,mbs=1,gbs=8,recompute=full",
        "tp=2,pp=2,dp=2,mbs=1,gbs=8,vpp=2,"
        "schedule=interleaved,recompute=selective",
        "tp=4,dp=2,mbs=1,gbs=8,sp=1"}) {
    auto s = parseStrategy(st);
    ASSERT_TRUE(bool(s));
    auto r = simulateStep(w, c, *s, fusedAssumptions(w));
    ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
    std::string why;
    ProgramSet set;
    ASSERT_TRUE(lowerAndCheck(w, c, st, why, &set)) << why;
    for (const Program &p : set.ranks) {
      double fwd = 0, bwd = 0;
      for (const Instruction &in : p.code) {
        bool task = in.span.size() > 1 && in.span[1] == '0' &&
                    (in.span.size() == 2 || in.span[2] == '.');
        bool counted = in.stream == StreamKind::Compute ||
                       (in.stream == StreamKind::Comm &&
                        in.name.find("gather") == std::string::npos);
        if (!task || !counted)
          continue;
        (in.span[0] == 'F' ? fwd : bwd) += in.predictedS;
      }
      const StageReport &stage = r->stages[p.stage];
      EXPECT_NEAR(fwd, stage.forwardS, 1e-9 + 1e-6 * stage.forwardS)
          << st << " rank " << p.rank;
      EXPECT_NEAR(bwd, stage.backwardS, 1e-9 + 1e-6 * stage.backwardS)
          << st << " rank " << p.rank;
    }
    EXPECT_NEAR(set.predictedStepS, r->stepS, 1e-12);
  }
}

ProgramSet pipelineSet() {
  mlir::MLIRContext ctx;
  Workload w = test::tinyGpt(ctx, KernelFusion::Fused);
  std::string why;
  ProgramSet set;
  EXPECT_TRUE(lowerAndCheck(w, preset("4xA100-80G"), "tp=2,pp=2,mbs=1,gbs=4",
                            why, &set))
      << why;
  return set;
}

std::string checkError(const ProgramSet &set) {
  llvm::Error e = checkPrograms(set);
  return e ? llvm::toString(std::move(e)) : "";
}

int find(const Program &p, InstrKind kind, int nth = 0) {
  for (int i = 0; i < int(p.code.size()); ++i)
    if (p.code[i].kind == kind && nth-- == 0)
      return i;
  ADD_FAILURE() << "no such instruction";
  return 0;
}

TEST(Lowering, BrokenProgramsNameTheRankAndTheInstruction) {
  ProgramSet good = pipelineSet();
  ASSERT_EQ(good.worldSize, 4);
  ASSERT_EQ(checkError(good), "");
  // Rank 2 runs stage 1 (pp stride 2); it receives stage 0's activations.
  ASSERT_EQ(good.ranks[2].stage, 1);

  { // A missing receive.
    ProgramSet bad = good;
    int recv = find(bad.ranks[2], InstrKind::Recv);
    bad.ranks[2].code[recv].kind = InstrKind::Kernel;
    std::string e = checkError(bad);
    EXPECT_NE(e.find("rank 0 instruction"), std::string::npos) << e;
    EXPECT_NE(e.find("has no matching receive"), std::string::npos) << e;
  }
  { // A collective out of order: rank 1 swaps two of its tp all-reduces
    // of different sizes.
    ProgramSet bad = good;
    std::vector<int> coll;
    for (int i = 0; i < int(bad.ranks[1].code.size()); ++i)
      if (bad.ranks[1].code[i].kind == InstrKind::Collective &&
          bad.ranks[1].code[i].group ==
              bad.ranks[1]
                  .code[find(bad.ranks[1], InstrKind::Collective)]
                  .group)
        coll.push_back(i);
    ASSERT_GE(coll.size(), 2u);
    size_t j = 1;
    while (j < coll.size() &&
           bad.ranks[1].code[coll[j]].bytes ==
               bad.ranks[1].code[coll[0]].bytes &&
           bad.ranks[1].code[coll[j]].collective ==
               bad.ranks[1].code[coll[0]].collective)
      ++j;
    ASSERT_LT(j, coll.size());
    std::swap(bad.ranks[1].code[coll[0]].bytes,
              bad.ranks[1].code[coll[j]].bytes);
    std::swap(bad.ranks[1].code[coll[0]].collective,
              bad.ranks[1].code[coll[j]].collective);
    std::string e = checkError(bad);
    EXPECT_NE(e.find("rank 1 instruction " + std::to_string(coll[0])),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("out of order"), std::string::npos) << e;
  }
  { // A dependency on a later instruction: a cycle.
    ProgramSet bad = good;
    bad.ranks[3].code[5].deps.push_back(9);
    std::string e = checkError(bad);
    EXPECT_NE(e.find("rank 3 instruction 5"), std::string::npos) << e;
    EXPECT_NE(e.find("cycle"), std::string::npos) << e;
  }
  { // Receives in the wrong order: stage 1 waits for micro-batch 1 first,
    // stage 0 sends micro-batch 0 first; the sends rendezvous: deadlock.
    ProgramSet bad = good;
    Program &p = bad.ranks[2];
    int a = find(p, InstrKind::Recv, 0), b = find(p, InstrKind::Recv, 1);
    std::swap(p.code[a].tag, p.code[b].tag);
    std::string e = checkError(bad);
    EXPECT_NE(e.find("deadlock: rank 0 instruction"), std::string::npos) << e;
    EXPECT_NE(e.find("send to 2"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 2 never reaches its receive"), std::string::npos)
        << e;
  }
  { // More memory than the plan predicts.
    ProgramSet bad = good;
    bad.ranks[0].predictedPeakBytes = bad.ranks[0].staticBytes;
    bad.memoryAllowanceBytes = 0;
    std::string e = checkError(bad);
    EXPECT_NE(e.find("rank 0 instruction"), std::string::npos) << e;
    EXPECT_NE(e.find("above the predicted peak"), std::string::npos) << e;
  }
  { // A buffer never freed.
    ProgramSet bad = good;
    bad.ranks[0].code[find(bad.ranks[0], InstrKind::Free)].kind =
        InstrKind::Wait;
    std::string e = checkError(bad);
    EXPECT_NE(e.find("rank 0: buffer #"), std::string::npos) << e;
  }
}

TEST(Lowering, VSchedulesNeedAQueuePerLinkAndDirection) {
  // A V's stage meets its neighbour both ways (chunk 0's activations go
  // down, the last chunk's come back up): with one queue per direction of
  // each link the set runs to its end; with one queue per peer, the
  // order in which a stage sends activations and gradients is not the
  // order in which its neighbour waits for them, and the rendezvous
  // deadlocks (what the check is there to find).
  Workload moe = test::moeModel(8, 10'000'000, 1 << 20);
  int merged = 0;
  for (const char *st : {"pp=2,dp=16,mbs=1,gbs=128,schedule=zb-v",
                         "pp=4,dp=8,mbs=1,gbs=64,schedule=zb-v",
                         "pp=4,ep=4,dp=8,mbs=1,gbs=64,schedule=dualpipev",
                         "pp=2,dp=16,mbs=1,gbs=128,schedule=dualpipev"}) {
    std::string why;
    ProgramSet set;
    ASSERT_TRUE(lowerAndCheck(moe, preset("4x8xA100-80G"), st, why, &set))
        << st << ": " << why;
    // Stage 0 both sends to and receives from stage 1, both ways.
    int sends = 0, gradientSends = 0;
    for (const Instruction &in : set.ranks[0].code)
      if (in.kind == InstrKind::Send && in.stream == StreamKind::PipeSend) {
        ++sends;
        gradientSends += in.backward;
      }
    EXPECT_GT(gradientSends, 0) << st;
    EXPECT_LT(gradientSends, sends) << st;
    for (Program &p : set.ranks)
      for (Instruction &in : p.code)
        if (in.stream == StreamKind::PipeSend ||
            in.stream == StreamKind::PipeRecv)
          in.backward = false;
    merged += checkError(set).find("deadlock") != std::string::npos;
  }
  EXPECT_GT(merged, 0);
}

TEST(Lowering, TheTextNamesSpansStreamsAndShapes) {
  ProgramSet set = pipelineSet();
  std::string text = programText(set, 2);
  EXPECT_NE(text.find("rank 2 of 4: A100-80G, replica group 0, stage 1; tp "
                      "0/2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("pp-recv F0      recv from 0 tag"), std::string::npos)
      << text;
  EXPECT_NE(text.find("gemm matmul m="), std::string::npos) << text;
  EXPECT_NE(text.find("all-reduce g"), std::string::npos) << text;
  EXPECT_NE(text.find("optimizer"), std::string::npos) << text;
}

TEST(Lowering, ProgramsRoundTripThroughJson) {
  ProgramSet set = pipelineSet();
  nlohmann::ordered_json j = programSetJson(set);
  auto back = programSetFromJson(nlohmann::json::parse(j.dump()));
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(checkError(*back), "");
  for (int r = 0; r < set.worldSize; ++r)
    EXPECT_EQ(programText(*back, r), programText(set, r));
  EXPECT_EQ(programSetJson(*back).dump(), j.dump());
  // A field of the wrong type is named.
  nlohmann::json bad = nlohmann::json::parse(j.dump());
  bad["ranks"][1]["code"][3]["kind"] = "teleport";
  auto refused = programSetFromJson(bad);
  ASSERT_FALSE(bool(refused));
  EXPECT_EQ(llvm::toString(refused.takeError()),
            "ranks[1].code[3].kind: unknown");
}

TEST(Lowering, QueuesAreStreamsAndPipelineLinksByDirection) {
  ProgramSet set = pipelineSet();
  std::vector<int> index;
  std::vector<Queue> queues = queuesOf(set.ranks[2], &index);
  ASSERT_FALSE(queues.empty());
  EXPECT_EQ(queues[0].stream, StreamKind::Compute);
  // Stage 1 of 2 (rank 2): activations in from rank 0, gradients out to it.
  std::vector<std::string> names;
  for (const Queue &q : queues)
    names.push_back(queueName(q));
  EXPECT_NE(
      std::find(names.begin(), names.end(), "pp-recv from 0 (activations)"),
      names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "pp-send to 0 (gradients)"),
            names.end());
  for (size_t i = 0; i < index.size(); ++i)
    EXPECT_EQ(queues[index[i]], queueOf(set.ranks[2].code[i]));
}

TEST(Lowering, WhatTheRuntimeCannotRunIsRefused) {
  mlir::MLIRContext ctx;
  Workload w = test::tinyGpt(ctx, KernelFusion::Fused);
  std::string why;
  EXPECT_FALSE(lowerAndCheck(w, preset("2xA100-80G"),
                             "pp=2,mbs=1,gbs=4,schedule=zb-2p", why));
  EXPECT_NE(why.find("schedule=zb-2p"), std::string::npos) << why;
}

/// torchtitan's per-op recompute: before each layer's backward, the ops
/// its policy did not save (every other matmul; not SDPA) run again, with
/// the sequence-parallel all-gathers.
TEST(Lowering, PerOpRecomputeRunsWhatThePolicyDidNotSave) {
  mlir::MLIRContext ctx;
  Workload w = test::tinyGpt(ctx, KernelFusion::Fused);
  std::string why;
  ProgramSet op, none;
  ASSERT_TRUE(lowerAndCheck(w, preset("2xA100-80G"),
                            "tp=2,sp=1,mbs=1,gbs=2,recompute=op", why, &op))
      << why;
  ASSERT_TRUE(lowerAndCheck(w, preset("2xA100-80G"), "tp=2,sp=1,mbs=1,gbs=2",
                            why, &none))
      << why;
  int matmuls = 0, recomputedGemms = 0, gathers = 0, attention = 0;
  for (const Instruction &in : none.ranks[0].code)
    matmuls += in.kind == InstrKind::Gemm && in.span[0] == 'F';
  for (const Instruction &in : op.ranks[0].code) {
    bool again = in.name.rfind("recompute", 0) == 0;
    recomputedGemms += again && in.kind == InstrKind::Gemm;
    gathers += in.name == "recompute all-gather";
    attention += again && in.kind == InstrKind::Attention;
  }
  EXPECT_GT(recomputedGemms, 0);
  EXPECT_LT(recomputedGemms, matmuls); // about half: every other is saved
  EXPECT_GT(gathers, 0);
  EXPECT_EQ(attention, 0); // SDPA's output is saved
  // Less kept than without recompute.
  double kept = 0, keptNone = 0;
  for (const Instruction &in : op.ranks[0].code)
    kept += in.kind == InstrKind::Alloc ? in.bytes : 0;
  for (const Instruction &in : none.ranks[0].code)
    keptNone += in.kind == InstrKind::Alloc ? in.bytes : 0;
  EXPECT_LT(kept, keptNone);
}

/// ZeRO-Offload: the shard's gradients down the host link, Adam on the
/// host, the weights back; the three add up to the simulator's optimizer
/// step.
TEST(Lowering, TheOptimizerOnTheHostCopiesAroundIt) {
  mlir::MLIRContext ctx;
  Workload w = test::tinyGpt(ctx, KernelFusion::Fused);
  for (const char *st : {"dp=2,mbs=1,gbs=2,zero=1,offload=optimizer",
                         "pp=2,mbs=1,gbs=4,offload=optimizer"}) {
    std::string why;
    ProgramSet set;
    ASSERT_TRUE(lowerAndCheck(w, preset("2xA100-80G"), st, why, &set))
        << st << ": " << why;
    auto s = parseStrategy(st);
    auto sim = simulateStep(w, preset("2xA100-80G"), *s, fusedAssumptions(w));
    ASSERT_TRUE(bool(sim));
    const Program &p = set.ranks[0];
    std::vector<const Instruction *> host;
    for (const Instruction &in : p.code)
      if (in.stream == StreamKind::HostCopy)
        host.push_back(&in);
    ASSERT_EQ(host.size(), 3u) << st;
    EXPECT_EQ(host[0]->kind, InstrKind::Copy);
    EXPECT_FALSE(host[0]->backward); // gradients down
    EXPECT_EQ(host[0]->buffer, kHeldBuffer);
    EXPECT_EQ(host[1]->kind, InstrKind::Optimizer);
    EXPECT_EQ(host[2]->kind, InstrKind::Copy);
    EXPECT_TRUE(host[2]->backward); // weights up
    double total = 0;
    for (const Instruction *in : host)
      total += in->predictedS;
    if (s->pp == 1) // one stage: the step's optimizer figure is its own
      EXPECT_NEAR(total, sim->optimizerS, 1e-9 + 1e-6 * total) << st;
    EXPECT_GT(host[1]->predictedS, 0) << st;
    // The step's last compute waits for the weights.
    EXPECT_EQ(p.code.back().kind == InstrKind::Wait ||
                  p.code.back().kind == InstrKind::Collective,
              true);
  }
}

/// Activation offload: each task's offloaded bytes go out beside its
/// forward and come back beside its backward on the host-copy stream,
/// through a staging buffer; the device holds the rest; the task ends when
/// its copy does.
TEST(Lowering, OffloadedActivationsCopyBesideTheirTasks) {
  mlir::MLIRContext ctx;
  // Twelve layers: a chunk offloads all its layers but the last.
  Workload w = test::builtinWorkload(ctx, "gpt3-125m");
  for (const char *st :
       {"dp=4,mbs=1,gbs=8,offload=activations",
        "pp=2,dp=2,mbs=1,gbs=8,offload=activations",
        "pp=2,dp=2,vpp=2,schedule=interleaved,mbs=1,gbs=8,offload=activations",
        "pp=2,dp=2,schedule=zb-v,mbs=1,gbs=8,offload=activations",
        "pp=2,dp=2,schedule=dualpipev,mbs=1,gbs=8,offload=activations",
        "tp=2,pp=2,mbs=2,gbs=8,zero=1,recompute=selective,offload="
        "activations"}) {
    std::string why;
    ProgramSet on, off;
    ASSERT_TRUE(lowerAndCheck(w, preset("4xA100-80G"), st, why, &on))
        << st << ": " << why;
    std::string without = std::string(st);
    without.erase(without.find(",offload=activations"));
    ASSERT_TRUE(lowerAndCheck(w, preset("4xA100-80G"), without, why, &off))
        << without << ": " << why;
    const Program &p = on.ranks[0];
    double out = 0, back = 0, kept = 0, keptOff = 0;
    for (size_t i = 0; i < p.code.size(); ++i) {
      const Instruction &in = p.code[i];
      if (in.kind != InstrKind::Copy)
        continue;
      EXPECT_EQ(in.stream, StreamKind::HostCopy) << st;
      EXPECT_GT(in.predictedS, 0) << st;
      (in.backward ? back : out) += in.bytes;
      // Its task's staging buffer is freed after it, waiting for it.
      bool waited = false;
      for (size_t j = i + 1; j < p.code.size() && !waited; ++j)
        waited = p.code[j].kind == InstrKind::Free &&
                 p.code[j].buffer == in.buffer &&
                 std::find(p.code[j].deps.begin(), p.code[j].deps.end(),
                           int(i)) != p.code[j].deps.end();
      EXPECT_TRUE(waited) << st << ": instruction " << i;
    }
    EXPECT_GT(out, 0) << st;
    EXPECT_EQ(out, back) << st; // what goes out comes back
    for (const Instruction &in : p.code)
      if (in.kind == InstrKind::Alloc && in.name == "activations")
        kept += in.bytes;
    for (const Instruction &in : off.ranks[0].code)
      if (in.kind == InstrKind::Alloc)
        keptOff += in.bytes;
    EXPECT_NEAR(kept + out, keptOff, 1e-6 * keptOff) << st;
    EXPECT_LT(p.predictedPeakBytes, off.ranks[0].predictedPeakBytes) << st;
  }
}

} // namespace

TEST(Lowering, EachRankChecksItselfAgainstItsPeers) {
  ProgramSet good = pipelineSet();
  ASSERT_EQ(good.ranks[2].stage, 1);
  auto rankError = [](const ProgramSet &set, int r) {
    llvm::Error e = checkRank(set, r);
    return e ? llvm::toString(std::move(e)) : "";
  };
  // Rank 0 sends to rank 2 (pp stride 2) and shares a tp group with 1.
  std::vector<int> peers = peersToMatch(good, 0);
  EXPECT_NE(std::find(peers.begin(), peers.end(), 1), peers.end());
  EXPECT_NE(std::find(peers.begin(), peers.end(), 2), peers.end());
  { // A missing receive: both ends see it.
    ProgramSet bad = good;
    int recv = find(bad.ranks[2], InstrKind::Recv);
    bad.ranks[2].code[recv].kind = InstrKind::Kernel;
    for (int r : {0, 2}) {
      std::string e = rankError(bad, r);
      EXPECT_NE(e.find("has no matching receive"), std::string::npos) << e;
    }
  }
  { // Rank 1 enters another collective: rank 0, before it in their group,
    // finds it.
    ProgramSet bad = good;
    bad.ranks[1].code[find(bad.ranks[1], InstrKind::Collective)].bytes *= 2;
    std::string e = rankError(bad, 0);
    EXPECT_NE(e.find("rank 1 instruction"), std::string::npos) << e;
    EXPECT_NE(e.find("out of order"), std::string::npos) << e;
  }
  { // A peer's program missing from a partial set.
    ProgramSet part = good;
    part.ranks[2] = Program{};
    part.ranks[2].rank = 2;
    part.ranks[2].lowered = false;
    EXPECT_FALSE(part.whole());
    std::string e = rankError(part, 0);
    EXPECT_NE(e.find("rank 2, which was not lowered"), std::string::npos) << e;
    EXPECT_NE(checkError(part).find("rank 2 was not lowered"),
              std::string::npos);
    // A partial set travels as JSON with its lowered ranks only.
    auto back = programSetFromJson(programSetJson(part));
    ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
    EXPECT_FALSE(back->whole());
    EXPECT_FALSE(back->ranks[2].lowered);
    EXPECT_EQ(back->ranks[3].code.size(), good.ranks[3].code.size());
    EXPECT_TRUE(back->pipeSends);
    // A rank listed twice, or one the world has not: one line naming it.
    nlohmann::ordered_json twice = programSetJson(part);
    twice["ranks"].push_back(twice["ranks"][0]);
    auto bad = programSetFromJson(twice);
    ASSERT_FALSE(bool(bad));
    std::string why = llvm::toString(bad.takeError());
    EXPECT_NE(why.find("rank: out of range or listed twice"), std::string::npos)
        << why;
    EXPECT_EQ(why.find('\n'), std::string::npos);
  }
  // Names of communicators: the members alone.
  EXPECT_EQ(groupKey({0, 2}), groupKey({0, 2}));
  EXPECT_NE(groupKey({0, 2}), groupKey({0, 1}));
  EXPECT_NE(groupKey({0, 1}), groupKey({0, 1, 2}));
}

TEST(Lowering, ZeroThreeUnderPipelineStagesGathersOnceAStep) {
  // Under pipeline stages a chunk's weights stay whole from its first
  // micro-batch's forward to its last one's backward: each layer gathered
  // in F0 and reduce-scattered in the last backward, once; without stages,
  // gathered in every forward and backward.
  mlir::MLIRContext ctx;
  Workload w = test::tinyGpt(ctx, KernelFusion::Fused);
  std::string why;
  ProgramSet piped, flat;
  ASSERT_TRUE(lowerAndCheck(w, preset("8xA100-80G"),
                            "pp=2,dp=4,mbs=1,gbs=16,zero=3", why, &piped))
      << why;
  ASSERT_TRUE(lowerAndCheck(w, preset("8xA100-80G"), "dp=8,mbs=1,gbs=32,zero=3",
                            why, &flat))
      << why;
  auto count = [](const Program &p, const std::string &name,
                  std::set<std::string> &spans) {
    int n = 0;
    for (const Instruction &in : p.code)
      if (in.kind == InstrKind::Collective && in.name == name) {
        ++n;
        spans.insert(in.span);
      }
    return n;
  };
  for (int rank : {0, 7}) {
    std::set<std::string> gatherSpans, scatterSpans;
    int gathers = count(piped.ranks[rank], "zero-3 weight gather", gatherSpans);
    int scatters = count(piped.ranks[rank], "zero-3 gradient reduce-scatter",
                         scatterSpans);
    EXPECT_GT(gathers, 0) << rank;
    EXPECT_GE(gathers, scatters) << rank; // frozen weights have no gradient
    EXPECT_EQ(gatherSpans, std::set<std::string>{"F0"}) << rank;
    EXPECT_EQ(scatterSpans, std::set<std::string>{"B3"}) << rank;
  }
  std::set<std::string> spans, ignored;
  int gathers = count(flat.ranks[0], "zero-3 weight gather", spans);
  int scatters =
      count(flat.ranks[0], "zero-3 gradient reduce-scatter", ignored);
  // Four micro-batches, each layer gathered for its forward and again for
  // its backward.
  EXPECT_EQ(spans.size(), 8u);
  EXPECT_GE(gathers, 2 * scatters);
}
