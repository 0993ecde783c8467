//===- SpeculationTest.cpp - speculative decoding priced and simulated ----===//
//
// The method's defaults and the tokens a step yields (Leviathan et al.'s
// sum, per position); a verification step's 1 + k queries a request and
// the drafter's passes; at one request the simulated time per output
// token falls by about the tokens a step yields, less the drafter's cost,
// every request still gets exactly its output; bad settings are one line.
//
//===----------------------------------------------------------------------===//

#include "orrery/CostModel/Speculation.h"
#include "TestSupport.h"
#include "orrery/CostModel/Serving.h"
#include "orrery/CostModel/ServingSim.h"

namespace orrery {
namespace {

TEST(Speculation, DefaultsAndTokensPerStep) {
  auto e3 = Speculation::parse("eagle3");
  ASSERT_TRUE(bool(e3));
  EXPECT_EQ(e3->k, 3);
  // 1 + 0.72 + 0.72^2 + 0.72^3: vLLM's acceptance test's 2.6.
  EXPECT_NEAR(e3->tokensPerStep(), 1 + 0.72 + 0.5184 + 0.373248, 1e-9);
  auto mtp = Speculation::parse("mtp,k=3");
  ASSERT_TRUE(bool(mtp));
  // Per position: 0.88, then 0.70, then 0.40: TensorRT-LLM measured 2.82.
  EXPECT_NEAR(mtp->tokensPerStep(), 1 + 0.88 + 0.616 + 0.2464, 1e-9);
  auto given = Speculation::parse("ngram,k=5,acceptance=0.5/0.25");
  ASSERT_TRUE(bool(given));
  EXPECT_NEAR(given->tokensPerStep(),
              1 + 0.5 + 0.125 + 0.03125 + 0.0078125 + 0.001953125, 1e-9);
  EXPECT_FALSE(given->draftsOnDevice());
  EXPECT_TRUE(e3->draftsOnDevice());
  auto off = Speculation::parse("off");
  ASSERT_TRUE(bool(off));
  EXPECT_FALSE(off->on());
  EXPECT_EQ(off->tokensPerStep(), 1);
  for (auto [text, part] :
       {std::pair<const char *, const char *>{"medusa", "unknown method"},
        {"eagle3,k=0", "k=0: expected 1 to 32"},
        {"eagle3,acceptance=1.2", "acceptance=1.2"},
        {"eagle3,k=2,k=3", "k given twice"},
        {"eagle3,depth=2", "unknown key 'depth'"}}) {
    auto bad = Speculation::parse(text);
    ASSERT_FALSE(bool(bad)) << text;
    std::string why = llvm::toString(bad.takeError());
    EXPECT_NE(why.find(part), std::string::npos) << why;
  }
}

/// Llama-3 8B on one H100, with a speculation config.
struct Llama8b : test::Served {
  Llama8b() : Served("llama3-8b", "1xH100-SXM") {}
  StepPricer pricer(const std::string &spec, int pp = 1) {
    StepPricer p = Served::pricer(1, "bf16", ServingEngine::Vllm, 1, pp);
    auto s = Speculation::parse(spec);
    EXPECT_TRUE(bool(s));
    EXPECT_FALSE(bool(p.setSpeculation(w, *s)));
    return p;
  }
};

TEST(Speculation, VerificationAndDraftPasses) {
  Llama8b m;
  StepPricer off = m.pricer("off"), eagle = m.pricer("eagle3"),
             ngram = m.pricer("ngram");
  StepBatch one;
  one.decodeRequests = one.sampled = 1;
  one.addDecode(1024, 0);
  StepBatch verify = one;
  verify.draftTokens = 3;
  // One request's 4 queries read the weights once: the linear layers
  // barely grow; the drafter adds a layer and the head, three times.
  StepTime plain = off.price(one), checked = eagle.price(verify);
  EXPECT_LT(checked.linearS, 1.1 * plain.linearS);
  EXPECT_GT(checked.draftS, 0);
  EXPECT_LT(checked.draftS, 0.4 * plain.latencyS);
  EXPECT_EQ(ngram.price(verify).draftS, 0);
  // 256 requests' 1,024 tokens: the linear layers compute, not stream.
  StepBatch many;
  many.decodeRequests = many.sampled = 256;
  for (int i = 0; i < 256; ++i)
    many.addDecode(1024, 0);
  StepBatch manyVerify = many;
  manyVerify.draftTokens = 768;
  EXPECT_GT(eagle.price(manyVerify).linearS, 1.5 * off.price(many).linearS);
  // Pipelined replicas are refused.
  auto replica = servingReplicaOn(m.cluster.sites[0].nodeGroups[0], 1, 1);
  auto two =
      servingReplicaOn(test::preset("2xH100-SXM").sites[0].nodeGroups[0], 1, 2);
  ASSERT_TRUE(replica && two);
  auto prec = ServingPrecision::parse("bf16", "auto");
  auto piped = StepPricer::create(m.w, *two, *prec, ServingEngine::Vllm);
  ASSERT_TRUE(bool(piped));
  auto e3 = Speculation::parse("eagle3");
  llvm::Error refused = piped->setSpeculation(m.w, *e3);
  ASSERT_TRUE(bool(refused));
  EXPECT_NE(llvm::toString(std::move(refused)).find("pipeline parallelism"),
            std::string::npos);
}

TEST(Speculation, OneRequestGetsItsTokensSooner) {
  Llama8b m;
  SchedulerLimits l;
  l.maxRequests = 64;
  l.maxBatchedTokens = 8192;
  l.kvCacheTokens = 400000;
  auto w = ServingWorkload::parse("isl=128,osl=500,requests=4,concurrency=1");
  ASSERT_TRUE(bool(w));
  StepPricer off = m.pricer("off"), eagle = m.pricer("eagle3");
  auto a = simulateServing(off, l, *w, 1), b = simulateServing(eagle, l, *w, 1);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->outputTokens, b->outputTokens);
  // 2.61 tokens a step, each step a little dearer: TPOT falls by 2x or
  // more, not by the whole 2.61.
  double gain = a->tpot.meanS / b->tpot.meanS;
  EXPECT_GT(gain, 1.8);
  EXPECT_LT(gain, 2.61);
  // Fewer steps: about 500 / 2.61 a request.
  EXPECT_LT(b->steps, a->steps / 2);
  // Without coalescing the decode steps the simulation agrees.
  SchedulerLimits each = l;
  each.coalesceDecodeSteps = false;
  auto c = simulateServing(eagle, each, *w, 1);
  ASSERT_TRUE(bool(c));
  EXPECT_NEAR(c->tpot.meanS, b->tpot.meanS, 0.02 * b->tpot.meanS);
  EXPECT_EQ(c->outputTokens, b->outputTokens);
}

} // namespace
} // namespace orrery
