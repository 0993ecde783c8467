//===- BlockKeys.cpp - the content keys of a request's KV-cache blocks ----===//
//
// docs/serving.md, "Prefix caching". A request's tokens are segments: the
// shared prefix it names, its own prompt, its output; a turn that continues
// a session begins with the whole of the previous turn. A full block's key
// chains the key of the block before it with the pieces of segments it
// holds (which segment, from which offset, how many tokens), as vLLM's
// block hash chains the parent hash with the block's token ids: two blocks
// share a key when everything up to and including them is alike.
//
//===----------------------------------------------------------------------===//
#include "orrery/CostModel/KvBlockPool.h"
#include "orrery/CostModel/ServingSim.h"

#include <algorithm>
#include <map>
#include <unordered_set>

namespace orrery {
namespace {

/// Distinct names for the three kinds of segment.
constexpr uint64_t kPrefixSegment = 0x7072656669780001ull;
constexpr uint64_t kPromptSegment = 0x70726f6d70740002ull;
constexpr uint64_t kOutputSegment = 0x6f75747075740003ull;
constexpr uint64_t kHashSegment = 0x6861736869640004ull;

/// The keys of a request's full blocks so far, and the block being filled.
struct Chain {
  std::vector<uint64_t> keys;
  uint64_t open = 0; ///< digest of the pieces in the block being filled
  int64_t filled = 0;

  void append(uint64_t segment, int64_t tokens, int64_t blockTokens) {
    for (int64_t offset = 0; offset < tokens;) {
      int64_t take = std::min(tokens - offset, blockTokens - filled);
      open = chainBlockKey(chainBlockKey(open, segment),
                           uint64_t(offset) << 32 ^ uint64_t(take));
      offset += take;
      filled += take;
      if (filled == blockTokens) {
        keys.push_back(chainBlockKey(keys.empty() ? 0 : keys.back(), open));
        open = 0;
        filled = 0;
      }
    }
  }
};

} // namespace

uint64_t requestBlockKey(const ServingRequest &r, int64_t i) {
  if (r.blockKeys && i < int64_t(r.blockKeys->size()))
    return (*r.blockKeys)[size_t(i)];
  return chainBlockKey(chainBlockKey(kPromptSegment, uint64_t(r.id)),
                       uint64_t(i));
}

void assignBlockKeys(std::vector<ServingRequest> &reqs, int64_t blockTokens) {
  if (blockTokens < 1)
    return;
  std::unordered_set<int64_t> continued;
  for (const ServingRequest &r : reqs)
    if (r.previousTurn >= 0)
      continued.insert(r.previousTurn);
  // A prompt that only starts with a named prefix shares no more than the
  // prefix's full blocks: one key vector for all the requests naming it.
  using Keys = std::shared_ptr<const std::vector<uint64_t>>;
  std::map<std::pair<uint64_t, int64_t>, std::pair<Keys, int>> prefixes;
  // A session's history: the chain at the end of each turn that a later
  // turn continues.
  std::unordered_map<int64_t, Chain> history;
  for (size_t i = 0; i < reqs.size(); ++i) {
    ServingRequest &r = reqs[i];
    bool whole = r.previousTurn >= 0 || r.hashIds || continued.count(int64_t(i));
    if (!whole && r.prefixId != 0) {
      int64_t shared = std::min(r.prefixTokens, r.inputTokens);
      auto &group = prefixes[{r.prefixId, shared}];
      if (!group.first) {
        Chain c;
        c.append(chainBlockKey(kPrefixSegment, r.prefixId), shared,
                 blockTokens);
        group.first = std::make_shared<const std::vector<uint64_t>>(c.keys);
      }
      ++group.second;
      r.blockKeys = group.first;
      continue;
    }
    if (!whole)
      continue;
    Chain c;
    int64_t own = r.inputTokens;
    auto was = history.find(r.previousTurn);
    if (r.previousTurn >= 0 && was != history.end()) {
      const ServingRequest &p = reqs[size_t(r.previousTurn)];
      c = was->second;
      own -= std::min(own, p.inputTokens + p.outputTokens);
    } else if (r.prefixId != 0) {
      int64_t shared = std::min(r.prefixTokens, r.inputTokens);
      c.append(chainBlockKey(kPrefixSegment, r.prefixId), shared, blockTokens);
      own -= shared;
    } else if (r.hashIds) {
      // Each id names the content of its 512 tokens (the last block may be
      // shorter); the ids already depend on everything before them.
      for (uint64_t id : *r.hashIds) {
        int64_t n = std::min(own, kTraceHashBlockTokens);
        c.append(chainBlockKey(kHashSegment, id), n, blockTokens);
        own -= n;
      }
    }
    c.append(chainBlockKey(kPromptSegment, uint64_t(i)), own, blockTokens);
    c.append(chainBlockKey(kOutputSegment, uint64_t(i)), r.outputTokens,
             blockTokens);
    r.blockKeys = std::make_shared<const std::vector<uint64_t>>(c.keys);
    if (continued.count(int64_t(i)))
      history[int64_t(i)] = std::move(c);
  }
  // Only a run of blocks from the start that another request also has can
  // ever be found by another: each request keeps the keys of that run (its
  // other blocks are its own, requestBlockKey's unique keys).
  std::unordered_map<uint64_t, int> seen;
  for (const auto &[name, group] : prefixes)
    for (uint64_t k : *group.first)
      seen[k] += group.second;
  for (const ServingRequest &r : reqs)
    if (r.blockKeys && (r.prefixId == 0 || r.previousTurn >= 0 || r.hashIds ||
                        continued.count(r.id)))
      for (uint64_t k : *r.blockKeys)
        ++seen[k];
  for (ServingRequest &r : reqs) {
    if (!r.blockKeys)
      continue;
    size_t run = 0;
    while (run < r.blockKeys->size() && seen[(*r.blockKeys)[run]] > 1)
      ++run;
    if (run == 0)
      r.blockKeys.reset();
    else if (run < r.blockKeys->size())
      r.blockKeys = std::make_shared<const std::vector<uint64_t>>(
          r.blockKeys->begin(), r.blockKeys->begin() + long(run));
  }
}

} // namespace orrery
