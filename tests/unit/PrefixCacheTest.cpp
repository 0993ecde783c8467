//===- PrefixCacheTest.cpp - the prefix cache and what it saves -----------===//
//
// The block pool against the engines' rules by hand (a released request's
// last blocks are evicted first, a duplicate stays private, free blocks go
// before cached ones); content keys (a shared prefix and a session's
// history share blocks, distinct prompts do not); traces with prefix and
// session columns; and the simulator: a shared prompt prefix found cached
// cuts TTFT and raises throughput as the share grows, nothing changes with
// caching off or with nothing shared, too many distinct prefixes for the
// cache are evicted; vLLM's cascade attention reads a prefix all requests
// share once.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"
#include "orrery/CostModel/KvBlockPool.h"
#include "orrery/CostModel/ServingSim.h"

namespace orrery {
namespace {

using test::builtinWorkload;

TEST(KvBlockPool, EvictsTheLastReleasedBlocksFirstAndFreeBlocksBeforeCached) {
  KvBlockPool pool(6, true);
  // A request takes 3 blocks and caches them as keys 11, 12, 13.
  pool.take(3);
  for (uint64_t k : {11, 12, 13})
    EXPECT_TRUE(pool.publish(k));
  EXPECT_FALSE(pool.publish(12)); // the same content again: stays private
  EXPECT_EQ(pool.used(), 3);
  pool.release({11, 12, 13});
  EXPECT_EQ(pool.available(), 6); // cached but free to take
  auto keys = [](int64_t i) { return uint64_t(11 + i); };
  EXPECT_EQ(pool.lookup(keys, 10), 3);
  // Three never-cached blocks go first: the cache is untouched.
  pool.take(3);
  EXPECT_EQ(pool.evictions(), 0);
  EXPECT_EQ(pool.lookup(keys, 10), 3);
  // One more evicts the request's last block, 13: 11 and 12 still hit.
  pool.take(1);
  EXPECT_EQ(pool.evictions(), 1);
  EXPECT_EQ(pool.lookup(keys, 10), 2);
  // A holder keeps a block from eviction; only 11 is left to evict.
  int64_t idle = -1;
  EXPECT_EQ(pool.lookup(keys, 1, &idle), 1);
  EXPECT_EQ(idle, 1);
  pool.hold(12);
  EXPECT_EQ(pool.available(), 1);
  EXPECT_EQ(pool.holders(12), 1);
  pool.take(1);
  EXPECT_EQ(pool.lookup(keys, 10), 0); // 11 gone: no run from the start
  EXPECT_EQ(pool.holders(12), 1);
  // Caching off: nothing is published or found.
  KvBlockPool off(4, false);
  EXPECT_FALSE(off.publish(1));
  EXPECT_EQ(off.lookup(keys, 4), 0);
}

TEST(KvBlockPool, HostTierKeepsWhatTheDeviceEvicts) {
  // Two device blocks, a host tier of three: every cached block is written
  // through; the device's evictions are found on the host; the host's
  // least recently used goes when a fourth arrives.
  KvBlockPool pool(2, true);
  pool.setHostTier(3);
  auto keys = [](int64_t i) { return uint64_t(100 + i); };
  pool.take(2);
  EXPECT_TRUE(pool.publish(100));
  EXPECT_TRUE(pool.publish(101));
  pool.release({100, 101});
  pool.take(2); // evicts both from the device
  EXPECT_EQ(pool.lookup(keys, 4), 0);
  EXPECT_EQ(pool.hostLookup(keys, 0, 4), 2);
  EXPECT_TRUE(pool.publish(200));
  EXPECT_TRUE(pool.publish(201)); // the host's oldest, 100 or 101, goes...
  // ... and 100 was used last (the lookup above touched 100 then 101):
  // 100 went, so the run from the start is gone, 101 stays.
  EXPECT_EQ(pool.hostLookup(keys, 0, 4), 0);
  EXPECT_EQ(pool.hostLookup(keys, 1, 4), 1);
  KvBlockPool none(2, true);
  EXPECT_EQ(none.hostLookup(keys, 0, 4), 0);
}

TEST(BlockKeys, SharedPrefixesAndSessionsShareBlocks) {
  std::vector<ServingRequest> reqs(4);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].id = int64_t(i);
    reqs[i].inputTokens = 100;
    reqs[i].outputTokens = 20;
  }
  // 0 and 1 share a 40-token prefix; 2 has another; 3 continues 1's
  // session (its 120 tokens of history, then 30 of its own).
  reqs[0].prefixId = reqs[1].prefixId = 7;
  reqs[2].prefixId = 8;
  reqs[0].prefixTokens = reqs[1].prefixTokens = reqs[2].prefixTokens = 40;
  reqs[3].previousTurn = 1;
  reqs[3].inputTokens = 150;
  assignBlockKeys(reqs, 16);
  auto key = [&](int r, int64_t i) { return requestBlockKey(reqs[r], i); };
  // Blocks 0 and 1 (tokens 0-31) are prefix alone; block 2 (32-47) mixes
  // the prefix with each prompt's own tokens.
  EXPECT_EQ(key(0, 0), key(1, 0));
  EXPECT_EQ(key(0, 1), key(1, 1));
  EXPECT_NE(key(0, 2), key(1, 2));
  EXPECT_NE(key(0, 0), key(2, 0));
  // The session's next turn shares every full block of 1's prompt and
  // output (120 tokens: 7 blocks), not the one its own tokens complete.
  for (int64_t i = 0; i < 7; ++i)
    EXPECT_EQ(key(3, i), key(1, i)) << i;
  EXPECT_NE(key(3, 7), key(1, 7));
  // A request sharing nothing has keys no other has.
  std::vector<ServingRequest> alone(2);
  alone[0].id = 0;
  alone[1].id = 1;
  alone[0].inputTokens = alone[1].inputTokens = 64;
  assignBlockKeys(alone, 16);
  EXPECT_FALSE(alone[0].blockKeys);
  EXPECT_NE(requestBlockKey(alone[0], 0), requestBlockKey(alone[1], 0));
}

TEST(ServingTrace, PrefixAndSessionColumns) {
  auto w = ServingWorkload::parseTrace(
      "arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens,"
      "session_id\n"
      "0,3000,100,system,2048,a\n"
      "0.1,2500,80,system,2048,\n"
      "0.2,3500,50,,,a\n"
      "0.3,200,10,,,\n",
      "t.csv");
  ASSERT_TRUE(bool(w)) << llvm::toString(w.takeError());
  ASSERT_EQ(w->trace.size(), 4u);
  EXPECT_TRUE(w->sharesContent());
  EXPECT_EQ(w->trace[0].prefixId, w->trace[1].prefixId);
  EXPECT_NE(w->trace[0].prefixId, 0u);
  EXPECT_EQ(w->trace[0].prefixTokens, 2048);
  EXPECT_EQ(w->trace[2].previousTurn, 0);
  EXPECT_EQ(w->trace[3].prefixId, 0u);
  EXPECT_EQ(w->trace[3].previousTurn, -1);
  auto bad = [](const std::string &text, const std::string &part) {
    auto t = ServingWorkload::parseTrace(text, "t.csv");
    ASSERT_FALSE(bool(t));
    std::string why = llvm::toString(t.takeError());
    EXPECT_NE(why.find(part), std::string::npos) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  };
  bad("arrival_s,input_tokens,output_tokens,prefix_id\n0,10,1,x\n",
      "t.csv:1: expected the header");
  bad("arrival_s,input_tokens,output_tokens,colour\n0,10,1,x\n",
      "column 'colour' unknown");
  bad("arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n"
      "0,10,1,x,20\n",
      "t.csv:2: prefix_tokens 20: longer than the prompt");
  bad("arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n"
      "0,10,1,x,\n",
      "t.csv:2: prefix_id and prefix_tokens go together");
  bad("arrival_s,input_tokens,output_tokens,session_id\n0,100,50,s\n"
      "1,120,5,s\n",
      "t.csv:3: input_tokens 120: shorter than its session's history (150");
  bad("arrival_s,input_tokens,output_tokens,prefix_tokens,prefix_id\n"
      "0,10,1,-2,x\n",
      "prefix_tokens '-2'");
  // JSON Lines: Orrery's fields, or a Mooncake trace's (timestamp in ms,
  // hash_ids naming 512-token blocks).
  auto jl = ServingWorkload::parseTrace(
      "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 5, "
      "\"hash_ids\": [7, 8, 9]}\n"
      "{\"timestamp\": 1500, \"input_length\": 700, \"output_length\": 5, "
      "\"hash_ids\": [7, 10]}\n"
      "{\"arrival_s\": 2, \"input_tokens\": 900, \"output_tokens\": 3, "
      "\"prefix_id\": \"sys\", \"prefix_tokens\": 512, \"session_id\": 4}\n",
      "t.jsonl");
  ASSERT_TRUE(bool(jl)) << llvm::toString(jl.takeError());
  ASSERT_EQ(jl->trace.size(), 3u);
  EXPECT_DOUBLE_EQ(jl->trace[1].arrivalS, 1.5);
  ASSERT_TRUE(jl->trace[0].hashIds);
  EXPECT_EQ(jl->trace[0].hashIds->size(), 3u);
  EXPECT_EQ(jl->trace[2].prefixTokens, 512);
  std::vector<ServingRequest> mc = jl->trace;
  for (size_t i = 0; i < mc.size(); ++i)
    mc[i].id = int64_t(i);
  assignBlockKeys(mc, 16);
  // Hash id 7 is the first 512 tokens of both: 32 blocks of 16 alike, the
  // 33rd not.
  for (int64_t i = 0; i < 32; ++i)
    EXPECT_EQ(requestBlockKey(mc[0], i), requestBlockKey(mc[1], i)) << i;
  EXPECT_NE(requestBlockKey(mc[0], 32), requestBlockKey(mc[1], 32));
  bad("{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 5, "
      "\"hash_ids\": [1, 2]}\n",
      "t.csv:1: hash_ids: expected an array of at most 1 ids");
  bad("{\"timestamp\": 0, \"arrival_s\": 0, \"input_length\": 10, "
      "\"output_length\": 5}\n",
      "t.csv:1: expected one of arrival_s (s) or timestamp (ms)");
  bad("{\"timestamp\": 0, \"input_len\": 100}\n", "field 'input_len' unknown");
  bad("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5}\n"
      "{oops\n",
      "t.csv:2: not JSON");
  bad("{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 5}\n"
      "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 5}\n",
      "t.csv:2: arrival goes back in time");
  // Synthetic workloads: prefix= within the prompt, groups with a prefix.
  auto ok = ServingWorkload::parse("isl=3000,osl=10,prefix=2048,"
                                   "prefix_groups=4,requests=100");
  ASSERT_TRUE(bool(ok));
  std::set<uint64_t> groups;
  for (const ServingRequest &r : ok->requestsToServe())
    groups.insert(r.prefixId);
  EXPECT_EQ(groups.size(), 4u);
  auto longer = ServingWorkload::parse("isl=1000,prefix=1000");
  ASSERT_FALSE(bool(longer));
  EXPECT_NE(llvm::toString(longer.takeError()).find("shorter than the prompt"),
            std::string::npos);
  // Log-normal lengths: their mean near the stated one, spread, seeded,
  // every prompt longer than its shared prefix.
  auto spread = ServingWorkload::parse(
      "isl=1000,osl=200,requests=4000,isl_sigma=0.8,osl_sigma=0.5,prefix=100");
  ASSERT_TRUE(bool(spread));
  double sum = 0;
  int64_t shortest = 1 << 30, longest = 0;
  for (const ServingRequest &r : spread->requestsToServe()) {
    sum += double(r.inputTokens);
    shortest = std::min(shortest, r.inputTokens);
    longest = std::max(longest, r.inputTokens + r.outputTokens);
  }
  EXPECT_NEAR(sum / 4000, 1000, 60);
  EXPECT_GT(shortest, 100);
  EXPECT_EQ(spread->longestRequestTokens(), longest);
  EXPECT_GT(longest, 4000);
  auto wide = ServingWorkload::parse("isl_sigma=5");
  ASSERT_FALSE(bool(wide));
  EXPECT_NE(llvm::toString(wide.takeError()).find("isl_sigma=5"),
            std::string::npos);
  auto lone = ServingWorkload::parse("prefix_groups=3");
  ASSERT_FALSE(bool(lone));
  EXPECT_NE(llvm::toString(lone.takeError()).find("without prefix="),
            std::string::npos);
}

/// Llama-3 8B on one H100, priced as vLLM and as TensorRT-LLM run it.
struct Llama8b : test::Served {
  std::optional<StepPricer> vllm, trtllm;
  Llama8b() : Served("llama3-8b", "1xH100-SXM") {
    vllm.emplace(pricer(1));
    trtllm.emplace(pricer(1, "bf16", ServingEngine::TensorRtLlm));
  }
};

SchedulerLimits limits(int64_t kvTokens, bool caching) {
  SchedulerLimits l;
  l.blockTokens = 16;
  l.maxRequests = 256;
  l.maxBatchedTokens = 8192;
  l.kvCacheTokens = kvTokens;
  l.prefixCaching = caching;
  return l;
}

ServingResult serve(const StepPricer &p, const SchedulerLimits &l,
                    const std::string &workload) {
  auto w = ServingWorkload::parse(workload);
  EXPECT_TRUE(bool(w));
  auto r = simulateServing(p, l, *w, 1);
  EXPECT_TRUE(bool(r)) << (r ? "" : llvm::toString(r.takeError()));
  return r ? *r : ServingResult{};
}

TEST(PrefixCaching, SharedPrefixCutsTtftAndRaisesThroughput) {
  Llama8b m;
  const std::string base = "isl=2048,osl=128,requests=300,rate=8";
  ServingResult off =
      serve(*m.vllm, limits(400000, false), base + ",prefix=1536");
  EXPECT_EQ(off.cachedPromptTokens, 0);
  double last = off.ttft.meanS;
  for (int prefix : {512, 1024, 1536}) {
    std::string w = base + ",prefix=" + std::to_string(prefix);
    ServingResult on = serve(*m.vllm, limits(400000, true), w);
    // Every request but the first finds the prefix's full blocks (a
    // 2048-token prompt recomputes its last block even on a full hit).
    EXPECT_NEAR(on.prefixHitRate(), double(prefix) / 2048, 0.01) << prefix;
    EXPECT_LT(on.ttft.meanS, last) << prefix;
    last = on.ttft.meanS;
  }
  // Three quarters of each prompt cached: its prefill is a quarter of the
  // work (and a quarter of the linear layers' tokens), and TTFT at a rate
  // well below saturation falls with it.
  EXPECT_LT(last, 0.5 * off.ttft.meanS);
  // Offline, the same work in less time.
  ServingResult offAll =
      serve(*m.vllm, limits(400000, false),
            "isl=2048,osl=128,requests=500,offline,prefix=1536");
  ServingResult onAll =
      serve(*m.vllm, limits(400000, true),
            "isl=2048,osl=128,requests=500,offline,prefix=1536");
  EXPECT_GT(onAll.requestsPerS, 1.8 * offAll.requestsPerS);
  // Nothing shared: caching changes nothing but a preempted request
  // finding its own blocks again.
  ServingResult plainOn = serve(*m.vllm, limits(400000, true), base);
  ServingResult plainOff = serve(*m.vllm, limits(400000, false), base);
  EXPECT_EQ(plainOn.cachedPromptTokens, 0);
  EXPECT_NEAR(plainOn.ttft.meanS, plainOff.ttft.meanS,
              1e-9 + 1e-6 * plainOff.ttft.meanS);
}

TEST(PrefixCaching, DistinctPrefixesBeyondTheCacheAreEvicted) {
  Llama8b m;
  // 40 distinct 2K prefixes in a cache of 20K tokens: each comes back
  // after the others have pushed it out, where 4 of them stay cached.
  std::string w = "isl=2560,osl=16,requests=400,rate=4,prefix=2048";
  ServingResult few =
      serve(*m.vllm, limits(20000, true), w + ",prefix_groups=4");
  ServingResult many =
      serve(*m.vllm, limits(20000, true), w + ",prefix_groups=40");
  EXPECT_GT(few.prefixHitRate(), 0.7);
  EXPECT_LT(many.prefixHitRate(), 0.5 * few.prefixHitRate());
  EXPECT_GT(many.prefixEvictions, few.prefixEvictions);
  EXPECT_GT(many.ttft.meanS, few.ttft.meanS);
}

TEST(PrefixCaching, TensorRtLlmReservesOnlyWhatIsNotCached) {
  Llama8b m;
  // A cache of 100 blocks of 64 tokens holds two whole requests (44 blocks
  // each); with their 2K prefix (32 blocks) cached each new one reserves
  // 12, and five run at once.
  std::string w = "isl=2560,osl=256,requests=64,offline,prefix=2048";
  SchedulerLimits trt = limits(6400, false);
  trt.blockTokens = 64;
  ServingResult off = serve(*m.trtllm, trt, w);
  trt.prefixCaching = true;
  ServingResult on = serve(*m.trtllm, trt, w);
  EXPECT_EQ(on.preemptions, 0);
  EXPECT_GT(on.meanRequestsPerStep, 2 * off.meanRequestsPerStep);
  EXPECT_LE(on.meanRequestsPerStep, 5.0);
  EXPECT_GT(on.requestsPerS, 2 * off.requestsPerS);
}

TEST(CascadeAttention, VllmReadsAPrefixAllRequestsShareOnce) {
  Llama8b m;
  // 256 requests decoding over 4K keys each, 3K of them common.
  StepBatch b;
  b.decodeRequests = b.sampled = 256;
  for (int i = 0; i < 256; ++i)
    b.addDecode(4096, 0);
  StepBatch shared = b;
  shared.commonPrefixKeys = 3072;
  StepTime plain = m.vllm->price(b), cascade = m.vllm->price(shared);
  // The keys read fall from 256 x 4096 to 3072 + 256 x 1024.
  EXPECT_LT(cascade.attentionS, 0.4 * plain.attentionS);
  EXPECT_GT(cascade.attentionS, 0.2 * plain.attentionS);
  // Below 256 shared tokens or 8 requests, or on TensorRT-LLM: as before.
  StepBatch shortPrefix = b;
  shortPrefix.commonPrefixKeys = 128;
  EXPECT_DOUBLE_EQ(m.vllm->price(shortPrefix).attentionS, plain.attentionS);
  EXPECT_DOUBLE_EQ(m.trtllm->price(shared).attentionS,
                   m.trtllm->price(b).attentionS);
  StepBatch few;
  few.decodeRequests = few.sampled = 4;
  for (int i = 0; i < 4; ++i)
    few.addDecode(4096, 0);
  StepBatch fewShared = few;
  fewShared.commonPrefixKeys = 3072;
  EXPECT_DOUBLE_EQ(m.vllm->price(fewShared).attentionS,
                   m.vllm->price(few).attentionS);
}

} // namespace
} // namespace orrery
