//===- KvBlockPool.cpp - a replica's KV-cache blocks and prefix cache -----===//
#include "orrery/CostModel/KvBlockPool.h"

#include <algorithm>
#include <cassert>

namespace orrery {

KvBlockPool::KvBlockPool(int64_t blocks, bool caching)
    : total_(std::max<int64_t>(0, blocks)), free_(total_), caching_(caching) {
}

void KvBlockPool::take(int64_t n) {
  assert(n <= available() && "taking more blocks than there are");
  while (n > free_ && !queue_.empty()) {
    Queued &q = queue_.front();
    if (q.run > 0) {
      int64_t m = std::min(q.run, n - free_);
      q.run -= m;
      free_ += m;
      queued_ -= m;
      if (q.run == 0)
        queue_.pop_front();
      continue;
    }
    auto it = cached_.find(q.key);
    if (it != cached_.end() && it->second.holders == 0 &&
        it->second.releasedAt == q.at) {
      cached_.erase(it);
      ++free_;
      --queued_;
      ++evictions_;
    }
    queue_.pop_front(); // evicted, or stale
  }
  free_ -= n;
}

void KvBlockPool::give(int64_t n) {
  if (n <= 0)
    return;
  if (!caching_) {
    free_ += n;
    return;
  }
  queue_.push_back({++clock_, 0, n});
  queued_ += n;
  compact();
}

void KvBlockPool::compact() {
  // Entries go stale as requests take cached blocks again; past twice the
  // pool, drop them (the queue's order is kept).
  if (queue_.size() <= size_t(2 * total_ + 1024))
    return;
  std::deque<Queued> kept;
  for (const Queued &q : queue_) {
    auto it = q.run > 0 ? cached_.end() : cached_.find(q.key);
    if (q.run > 0 || (it != cached_.end() && it->second.holders == 0 &&
                      it->second.releasedAt == q.at))
      kept.push_back(q);
  }
  queue_.swap(kept);
}

int64_t KvBlockPool::lookup(const std::function<uint64_t(int64_t)> &key,
                            int64_t limit, int64_t *idle) const {
  int64_t hits = 0, unheld = 0;
  if (caching_)
    for (; hits < limit; ++hits) {
      auto it = cached_.find(key(hits));
      if (it == cached_.end())
        break;
      if (it->second.holders == 0)
        ++unheld;
    }
  if (idle)
    *idle = unheld;
  return hits;
}

void KvBlockPool::hold(uint64_t key) {
  Cached &c = cached_.at(key);
  if (c.holders++ == 0)
    --queued_; // its queue entry goes stale
}

bool KvBlockPool::publish(uint64_t key) {
  if (!caching_ || cached_.count(key))
    return false;
  cached_[key].holders = 1;
  writeToHost(key);
  return true;
}

void KvBlockPool::writeToHost(uint64_t key) {
  if (hostCapacity_ <= 0)
    return;
  host_[key] = ++hostClock_;
  hostOrder_.emplace_back(hostClock_, key);
  while (int64_t(host_.size()) > hostCapacity_ && !hostOrder_.empty()) {
    auto [at, k] = hostOrder_.front();
    hostOrder_.pop_front();
    auto it = host_.find(k);
    if (it != host_.end() && it->second == at)
      host_.erase(it);
  }
  if (hostOrder_.size() > size_t(4 * hostCapacity_ + 1024)) {
    std::deque<std::pair<uint64_t, uint64_t>> kept;
    for (const auto &e : hostOrder_) {
      auto it = host_.find(e.second);
      if (it != host_.end() && it->second == e.first)
        kept.push_back(e);
    }
    hostOrder_.swap(kept);
  }
}

int64_t KvBlockPool::hostLookup(const std::function<uint64_t(int64_t)> &key,
                                int64_t from, int64_t limit) {
  int64_t n = 0;
  if (hostCapacity_ > 0)
    for (int64_t i = from; i < limit; ++i) {
      auto it = host_.find(key(i));
      if (it == host_.end())
        break;
      // A hit is a use: it moves to the tail.
      it->second = ++hostClock_;
      hostOrder_.emplace_back(hostClock_, it->first);
      ++n;
    }
  return n;
}

void KvBlockPool::release(const std::vector<uint64_t> &keys) {
  // The last block joins the queue first, so it is evicted first: a later
  // request sharing the start of this one keeps its hits longest.
  for (auto k = keys.rbegin(); k != keys.rend(); ++k) {
    Cached &c = cached_.at(*k);
    if (--c.holders == 0) {
      c.releasedAt = ++clock_;
      queue_.push_back({c.releasedAt, *k, 0});
      ++queued_;
    }
  }
  compact();
}

uint64_t chainBlockKey(uint64_t parent, uint64_t content) {
  // splitmix64's finalizer over the pair: a 64-bit digest, the same on
  // every platform.
  uint64_t z = parent * 0x9e3779b97f4a7c15ull + content + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (z ^ (z >> 31)) | 1; // never 0, the key of no block
}

} // namespace orrery
