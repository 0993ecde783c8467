//===- KvBlockPool.h - a replica's KV-cache blocks and prefix cache -*- C++
//-*-===//
//
// docs/serving.md, "Prefix caching". An engine keeps its KV cache in blocks
// of a fixed number of tokens. With prefix caching on (vLLM's automatic
// prefix caching, SGLang's radix cache, TensorRT-LLM's KV-cache block
// reuse) a block that is full and computed is named by its content: a key
// chained from the key of the block before it and the tokens it holds, so
// two requests whose prompts begin alike share the blocks of what they
// share. A block no request holds any more stays cached until the space is
// needed: every block a request lets go joins the tail of one free-block
// queue (its last blocks first), cached or not, and new blocks come from
// the queue's head, evicting what was cached there (vLLM v1's
// FreeKVCacheBlockQueue); blocks never used come before all. A new request
// takes the
// longest run of cached blocks at the start of its prompt and computes only
// the rest; a full hit still computes the prompt's last token.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_KVBLOCKPOOL_H
#define ORRERY_COSTMODEL_KVBLOCKPOOL_H

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <unordered_map>
#include <vector>

namespace orrery {

class KvBlockPool {
public:
  /// `blocks` in all; `caching` false: a block is free or held, never
  /// cached (every lookup misses, nothing is published).
  KvBlockPool(int64_t blocks, bool caching);

  bool caching() const { return caching_; }
  int64_t total() const { return total_; }
  /// Blocks a request may take: free ones and cached ones no request holds.
  int64_t available() const { return free_ + queued_; }
  /// Blocks requests hold (private or cached).
  int64_t used() const { return total_ - available(); }

  /// Takes `n` private blocks (n <= available()): never-used ones first,
  /// then from the head of the free-block queue, evicting what is cached
  /// there.
  void take(int64_t n);
  /// Gives `n` private blocks back: they join the queue's tail (nothing
  /// will find their content).
  void give(int64_t n);

  /// How many blocks at the start of a request are cached: the keys
  /// `key(0)`, `key(1)`, ... up to `limit` blocks, stopping at the first
  /// miss. `idle` (when given) counts those no request holds: holding them
  /// takes them out of available().
  int64_t lookup(const std::function<uint64_t(int64_t)> &key, int64_t limit,
                 int64_t *idle = nullptr) const;
  /// A request holds the cached block `key` (found by lookup()).
  void hold(uint64_t key);
  /// A private block a request has filled and computed is cached as `key`:
  /// true when it now is (the request holds it as a cached block); false
  /// when another block already holds the same content (the request's
  /// copy stays private, as a duplicate).
  bool publish(uint64_t key);
  /// A request lets go of its cached blocks (`keys`, in the order of its
  /// tokens): those no other request holds join the queue's tail, the last
  /// block first.
  void release(const std::vector<uint64_t> &keys);

  /// A second tier in host memory (KV-cache offload: vLLM's
  /// OffloadingConnector, LMCache, SGLang's HiCache, TensorRT-LLM's
  /// host_cache_size): every block cached on the device is also written to
  /// it (write-through), least recently used out when full.
  void setHostTier(int64_t blocks) { hostCapacity_ = std::max<int64_t>(0, blocks); }
  int64_t hostCapacity() const { return hostCapacity_; }
  /// How many blocks after the first `from` of a request the host tier
  /// holds, up to `limit` in all, stopping at the first miss.
  int64_t hostLookup(const std::function<uint64_t(int64_t)> &key, int64_t from,
                     int64_t limit);
  /// Blocks a request found on the host and loaded.
  int64_t hostLoads() const { return hostLoads_; }
  void countHostLoads(int64_t n) { hostLoads_ += n; }

  int64_t evictions() const { return evictions_; }
  /// Requests holding the cached block `key` (0 when none or not cached).
  int64_t holders(uint64_t key) const {
    auto it = cached_.find(key);
    return it == cached_.end() ? 0 : it->second.holders;
  }

private:
  void compact();
  void writeToHost(uint64_t key);
  struct Cached {
    int64_t holders = 0;
    uint64_t releasedAt = 0; ///< its place in the queue
  };
  /// An entry of the free-block queue: a cached block (`key`; stale once a
  /// request holds it again or it was released later), or `run` blocks
  /// whose content nothing will ask for.
  struct Queued {
    uint64_t at = 0, key = 0;
    int64_t run = 0;
  };
  int64_t total_ = 0, free_ = 0, queued_ = 0, evictions_ = 0;
  bool caching_ = false;
  uint64_t clock_ = 0;
  std::unordered_map<uint64_t, Cached> cached_;
  std::deque<Queued> queue_;
  /// The host tier: each block's last use, and the uses in order (stale
  /// entries dropped lazily).
  int64_t hostCapacity_ = 0, hostLoads_ = 0;
  uint64_t hostClock_ = 0;
  std::unordered_map<uint64_t, uint64_t> host_;
  std::deque<std::pair<uint64_t, uint64_t>> hostOrder_;
};

/// A block's content key: `parent` (0 for a request's first block) chained
/// with a digest of the tokens it holds (deterministic on every platform).
uint64_t chainBlockKey(uint64_t parent, uint64_t content);

} // namespace orrery

#endif // ORRERY_COSTMODEL_KVBLOCKPOOL_H
