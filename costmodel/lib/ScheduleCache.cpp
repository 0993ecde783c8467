//===- ScheduleCache.cpp - the schedules' task orders, built once ---------===//
//
// A search prices thousands of candidates over a few hundred pipelines
// (schedule, stages, chunks per stage, micro-batches): each pipeline's task
// order is built once, with the peaks of the activations it holds, and
// shared by every thread that prices a step of that pipeline. The orders
// are pure functions of their key, so the bytes a search writes do not
// depend on which thread built one or whether it was kept.
//
//===----------------------------------------------------------------------===//

#include "Simulation.h"

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <set>

namespace orrery {
namespace detail {

namespace {

/// The orders built, the least recently used dropped past a budget of
/// tasks (24 bytes each: the budget is about 48 MiB).
class ScheduleCache {
public:
  /// What an order depends on: the schedule, its stages and chunks, the
  /// micro-batches, and a folded DualPipe's turn.
  using Key = std::array<int, 5>;

  std::shared_ptr<const ScheduleOrder> find(const Key &key) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = kept.find(key);
    if (it == kept.end())
      return nullptr;
    it->second.used = ++clock;
    return it->second.order;
  }

  void keep(const Key &key, std::shared_ptr<const ScheduleOrder> order) {
    size_t tasks = 0;
    for (const std::vector<Task> &stage : order->tasks)
      tasks += stage.size();
    std::lock_guard<std::mutex> lock(mutex);
    auto [it, added] = kept.emplace(key, Kept{std::move(order), tasks, 0});
    it->second.used = ++clock;
    if (!added)
      return;
    keptTasks += tasks;
    while (keptTasks > kBudgetTasks && kept.size() > 1) {
      auto oldest = kept.begin();
      for (auto k = kept.begin(); k != kept.end(); ++k)
        if (k->second.used < oldest->second.used)
          oldest = k;
      keptTasks -= oldest->second.tasks;
      kept.erase(oldest);
    }
  }

private:
  static constexpr size_t kBudgetTasks = size_t(2) << 20;
  struct Kept {
    std::shared_ptr<const ScheduleOrder> order;
    size_t tasks = 0;
    uint64_t used = 0;
  };
  std::mutex mutex;
  std::map<Key, Kept> kept;
  size_t keptTasks = 0;
  uint64_t clock = 0;
};

ScheduleCache &scheduleCache() {
  static ScheduleCache cache;
  return cache;
}

/// The points of `points` that no other point reaches in every count. In
/// decreasing (lexicographic) order a point's dominators come before it, and
/// one of them is kept unless itself dominated by a kept one: comparing each
/// point with the kept ones suffices.
std::vector<std::vector<int>>
undominated(const std::set<std::vector<int>> &points) {
  std::vector<std::vector<int>> peaks;
  for (auto p = points.rbegin(); p != points.rend(); ++p) {
    bool dominated =
        std::any_of(peaks.begin(), peaks.end(), [&](const std::vector<int> &q) {
          for (size_t k = 0; k < q.size(); ++k)
            if (q[k] < (*p)[k])
              return false;
          return true;
        });
    if (!dominated)
      peaks.push_back(*p);
  }
  return peaks;
}

} // namespace

std::shared_ptr<const ScheduleOrder> Simulation::schedule(int m) const {
  ScheduleCache::Key key = {int(s.schedule), s.pp, s.virtualStages, m,
                            int(dualPipeTurn)};
  if (auto order = scheduleCache().find(key))
    return order;
  auto order = std::make_shared<ScheduleOrder>();
  order->tasks = buildSchedule(m);
  findHeldPeaks(*order);
  scheduleCache().keep(key, order);
  return order;
}

/// After each task of a stage: a forward holds one more micro-batch of its
/// chunk, a backward (not a W) one fewer; a DualPipeV pair's backward frees
/// its chunk's after the pair (the peak counts it held). Only the points
/// before a decrease can be peaks (one after an increase reaches every
/// count of the one before it); the steady state repeats one point.
void Simulation::findHeldPeaks(ScheduleOrder &order) const {
  int pp = s.pp, v = s.virtualStages;
  order.heldPeaks.assign(pp, {});
  std::vector<int> slotOf(size_t(pp) * v, 0);
  for (int i = 0; i < pp; ++i)
    for (int k = 0; k < v; ++k)
      slotOf[s.chunkOnStage(i, k)] = k;
  for (int i = 0; i < pp; ++i) {
    std::vector<int> held(v, 0), last;
    std::set<std::vector<int>> points = {held};
    auto note = [&] {
      if (held != last) {
        points.insert(held);
        last = held;
      }
    };
    for (const Task &t : order.tasks[i]) {
      if (t.backward && !t.weight)
        note(); // the point before this decrease
      if (!t.backward)
        ++held[slotOf[t.vs]];
      else if (!t.weight)
        --held[slotOf[t.vs]];
      if (t.pairVs >= 0) {
        note();
        --held[slotOf[t.pairVs]];
      }
    }
    note();
    order.heldPeaks[i] = undominated(points);
  }
}

} // namespace detail
} // namespace orrery
