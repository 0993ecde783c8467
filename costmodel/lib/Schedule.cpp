//===- Schedule.cpp - pipeline schedules, task by task --------------------===//
//
// Each schedule (GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-2p, ZB-V,
// DualPipeV) as
// an ordered task list per pipeline stage (Simulation::schedule), and the
// event-by-event run of those lists with the transfers between stages as
// delays on the dependencies (runSchedule). Simulator.cpp prices the tasks
// and the step around them; the lowering (Lowering.cpp) writes the same
// orders as instructions.
//
//===----------------------------------------------------------------------===//

#include "Simulation.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

namespace orrery {
namespace detail {

// ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, §6) on
// stage i, in the order PyTorch's ScheduleZBVZeroBubble runs it: chunk 0
// (model chunk i) and chunk 1 (model chunk 2pp-1-i); 2(pp-i)-1 forwards
// of chunk 0, i pairs of forwards of both chunks, pp-i steps of F1 B1 W1,
// the steady F0 B0 W0 F1 B1 W1, then i pairs of B0 B1, pp-i of B0 W0 and
// the W left. Planned for max(2pp-1, m) micro-batches; those past m drop.
void Simulation::zeroBubbleV(int i, int m, std::vector<Task> &o) const {
  int pp = s.pp, n = std::max(2 * pp - 1, m);
  int c0 = s.chunkOnStage(i, 0), c1 = s.chunkOnStage(i, 1);
  int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  auto add = [&](int vs, int mb, bool backward, bool weight) {
    if (mb < m)
      o.push_back({vs, mb, backward, weight});
  };
  for (int k = 0; k < 2 * (pp - i) - 1; ++k)
    add(c0, f0++, false, false);
  for (int k = 0; k < i; ++k) {
    add(c1, f1++, false, false);
    add(c0, f0++, false, false);
  }
  for (int k = 0; k < pp - i; ++k) {
    add(c1, f1++, false, false);
    add(c1, b1, true, false);
    add(c1, b1++, true, true);
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n)
      add(c0, f0++, false, false);
    add(c0, b0, true, false);
    add(c0, b0++, true, true);
    add(c1, f1++, false, false);
    add(c1, b1, true, false);
    add(c1, b1++, true, true);
  }
  int w0 = b0, w1 = b1;
  for (int k = 0; k < i; ++k) {
    add(c0, b0++, true, false);
    add(c1, b1++, true, false);
  }
  for (int k = 0; k < pp - i; ++k) {
    add(c0, b0++, true, false);
    add(c0, w0++, true, true);
  }
  while (w1 < b1)
    add(c1, w1++, true, true);
  while (w0 < b0)
    add(c0, w0++, true, true);
}

// ZB-2p (Qi et al., ICLR 2024, §3.2 and Table 4) on stage i: the
// forwards that fit before the first input gradient comes back when every
// pass takes about as long, 2(pp-i)-1, then each B followed by the next F;
// every W listed at the latest place it may run: before an F that would
// otherwise hold more than 2pp micro-batches (those whose W has not run
// keep the inputs it reads), or at the end. The run (ScheduleRun) moves
// each W earlier, into idle time its stage meets after the W's B.
void Simulation::zeroBubble2p(int i, int m, std::vector<Task> &o) const {
  int limit = 2 * s.pp;
  int f = 0, b = 0, w = 0;
  auto weight = [&] {
    Task t{i, w++, true, true};
    t.deferrable = true;
    o.push_back(t);
  };
  for (int warm = std::min(m, 2 * (s.pp - i) - 1); f < warm;)
    o.push_back({i, f++, false});
  while (b < m) {
    o.push_back({i, b++, true});
    if (f == m)
      continue;
    while (f + 1 - w > limit)
      weight();
    o.push_back({i, f++, false});
  }
  while (w < m)
    weight();
}

// DualPipeV (deepseek-ai/DualPipe, dualpipev.py; PyTorch's
// ScheduleDualPipeV) on stage i, chunks as ZB-V's. Micro-batches go in
// order per chunk and kind; a backward either computes the input gradient
// alone (its W queued, run first in first out where the schedule says) or
// everything (full). Steps: 2(pp-i-1) F0; i+1 of F0 F1; pp-i-1 of B1 W F1;
// m-2pp+i+1 of the overlapped pairs F0&B1 and F1&B0 (the last stage runs
// its first F0 and B1 apart); pp-i-1 of B1 and F1&B0; i+1 of B1 B0, the
// second half of them split (which half starts it alternates with i's
// parity); pp-i-1 of W B0; i+1 W.
void Simulation::dualPipeV(int i, int m, std::vector<Task> &o) const {
  int pp = s.pp;
  int c[2] = {s.chunkOnStage(i, 0), s.chunkOnStage(i, 1)};
  int f[2] = {0, 0}, b[2] = {0, 0};
  std::deque<std::pair<int, int>> weights;
  auto F = [&](int k) { o.push_back({c[k], f[k]++, false}); };
  auto B = [&](int k, bool split) {
    Task t{c[k], b[k]++, true};
    t.full = !split;
    if (split)
      weights.push_back({t.vs, t.mb});
    o.push_back(t);
  };
  auto W = [&] {
    if (weights.empty())
      return;
    o.push_back({weights.front().first, weights.front().second, true, true});
    weights.pop_front();
  };
  auto FB = [&](int fk, int bk) {
    Task t{c[fk], f[fk]++, false};
    t.pairVs = c[bk];
    t.pairMb = b[bk]++;
    o.push_back(t);
  };
  for (int k = 0; k < 2 * (pp - i - 1); ++k)
    F(0);
  for (int k = 0; k < i + 1; ++k) {
    F(0);
    F(1);
  }
  for (int k = 0; k < pp - i - 1; ++k) {
    B(1, true);
    W();
    F(1);
  }
  for (int k = 0; k < m - 2 * pp + i + 1; ++k) {
    if (k == 0 && i == pp - 1) {
      F(0);
      B(1, false);
    } else {
      FB(0, 1);
    }
    FB(1, 0);
  }
  for (int k = 0; k < pp - i - 1; ++k) {
    B(1, false);
    FB(1, 0);
  }
  bool split = false;
  int half = (i + 1) / 2;
  for (int k = 0; k < i + 1; ++k) {
    if (k == half && i % 2 == 1)
      split = true;
    B(1, split);
    if (k == half && i % 2 == 0)
      split = true;
    B(0, split);
  }
  for (int k = 0; k < pp - i - 1; ++k) {
    W();
    B(0, split);
  }
  for (int k = 0; k < i + 1; ++k)
    W();
}

TaskOrder Simulation::buildSchedule(int m) const {
  int pp = s.pp, v = s.virtualStages;
  TaskOrder order(pp);
  // Every schedule runs each chunk's forward, backward and (split)
  // weight-gradient task once a micro-batch; ZB-V plans at least 2pp-1.
  size_t tasks = size_t(std::max(m, 2 * pp - 1)) * v * 3;
  for (int i = 0; i < pp; ++i) {
    auto &o = order[i];
    o.reserve(tasks);
    if (s.schedule == Schedule::GPipe) {
      for (int mb = 0; mb < m; ++mb)
        for (int c = 0; c < v; ++c)
          o.push_back({c * pp + i, mb, false});
      for (int mb = 0; mb < m; ++mb)
        for (int c = v - 1; c >= 0; --c)
          o.push_back({c * pp + i, mb, true});
      continue;
    }
    if (s.schedule == Schedule::ZeroBubbleH1 && pp > 1) {
      // ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024;
      // the authors' Megatron schedule): step x runs F(x), the input
      // gradient B(x - (pp-1-i)) and the weight gradient W(x - (pp-1)),
      // those that exist: pp-1-i forwards first, then i F-B pairs whose
      // W waits, the F-B-W steady state, B-W pairs, and the i deferred
      // W last. The first stage defers none (1F1B's memory there), the
      // last pp-1, so the input gradients run back without the weight
      // gradients on their path.
      for (int x = 0; x < m + pp - 1; ++x) {
        if (x < m)
          o.push_back({i, x, false});
        int b = x - (pp - 1 - i), wmb = x - (pp - 1);
        if (b >= 0 && b < m)
          o.push_back({i, b, true});
        if (wmb >= 0 && wmb < m)
          o.push_back({i, wmb, true, true});
      }
      continue;
    }
    if (s.schedule == Schedule::ZeroBubble2p && pp > 1) {
      zeroBubble2p(i, m, o);
      continue;
    }
    if (s.schedule == Schedule::ZeroBubbleV && pp > 1) {
      zeroBubbleV(i, m, o);
      continue;
    }
    if (s.schedule == Schedule::DualPipeV && (pp > 1 || dualPipeTurn)) {
      dualPipeV(i, m, o);
      continue;
    }
    // Megatron-LM's (interleaved) 1F1B: forward k runs chunk (k/pp)%v of
    // micro-batch (k/(pp*v))*pp + k%pp; backwards visit chunks in reverse.
    int total = m * v;
    auto task = [&](int k, bool backward) {
      int inGroup = k % (pp * v);
      int chunk = inGroup / pp;
      if (backward)
        chunk = v - 1 - chunk;
      int mb = (k / (pp * v)) * pp + k % pp;
      return Task{chunk * pp + i, mb, backward};
    };
    int warmup = v == 1 ? std::min(pp - i - 1, m)
                        : std::min((pp - i - 1) * 2 + (v - 1) * pp, total);
    int f = 0, b = 0;
    for (; f < warmup; ++f)
      o.push_back(task(f, false));
    while (f < total) {
      o.push_back(task(f++, false));
      o.back().sendsWithNext = v > 1;
      o.push_back(task(b++, true));
    }
    while (b < total)
      o.push_back(task(b++, true));
  }
  return order;
}

namespace {

/// One run of the stages' task lists (runSchedule): when each task's result
/// is sent and computed, and where each stage is in its list.
class ScheduleRun {
public:
  /// What one visit to a stage did: ran its next task, ran a deferrable W
  /// early (the next task waits on its inputs), passed a W that ran early,
  /// or nothing (the next task's inputs have not been produced).
  enum class Step { Ran, Filled, Skipped, Blocked };

  ScheduleRun(const std::vector<std::vector<Task>> &order, int chunks, int m,
              const std::vector<double> &fwdS, const std::vector<double> &bwdS,
              const PipelineLinks &links, std::vector<TraceEvent> *trace,
              const std::vector<double> *weightS,
              const std::vector<double> *fwdCommS,
              const std::vector<double> *bwdCommS)
      : order(order), chunks(chunks), m(m), pp(int(order.size())),
        v(chunks / pp), fwdS(fwdS), bwdS(bwdS), links(links), trace(trace),
        weightS(weightS), fwdCommS(fwdCommS), bwdCommS(bwdCommS),
        fDone(size_t(chunks) * m, -1), bDone(size_t(chunks) * m, -1),
        fComputed(size_t(chunks) * m, -1), next(pp, 0),
        pending(pp, {SIZE_MAX, 0.0}), bRan(pp, 0), wRan(pp, 0) {
    tl.free.assign(pp, 0);
    tl.busy.assign(pp, 0);
    tl.lastBackwardS.assign(pp, 0);
  }

  Timeline run() {
    size_t remaining = 0;
    for (const auto &o : order)
      remaining += o.size();
    // Each task's times follow from its inputs' alone, so the stages may be
    // visited in any order: down the pipeline and back up in turn, as the
    // forwards flow down and the backwards up (fewer visits to a stage
    // whose next task waits); a trace keeps its events in the first
    // stage's order.
    for (bool down = true; remaining; down = trace || !down) {
      bool progress = false;
      for (int k = 0; k < pp; ++k) {
        int i = down ? k : pp - 1 - k;
        while (next[i] < order[i].size()) {
          Step step = runNext(i);
          if (step == Step::Blocked)
            break;
          progress = true;
          if (step != Step::Filled) // a W run early stays listed
            ++next[i];
          if (step != Step::Skipped) // a W listed but run early
            --remaining;
        }
      }
      if (!progress) {
        tl.ok = false;
        return tl;
      }
    }
    return tl;
  }

private:
  const std::vector<std::vector<Task>> &order;
  int chunks, m, pp, v;
  const std::vector<double> &fwdS, &bwdS;
  const PipelineLinks &links;
  std::vector<TraceEvent> *trace;
  const std::vector<double> *weightS, *fwdCommS, *bwdCommS;
  Timeline tl;
  // When each task's result is sent (the next chunk may use it) and, for
  // forwards, when it was computed (its own backward may start).
  std::vector<double> fDone, bDone, fComputed;
  std::vector<size_t> next;
  // Per stage: a forward whose send waits for the next task (its index into
  // fDone, and the send's duration), or none.
  std::vector<std::pair<size_t, double>> pending;
  // Per stage (one chunk each, ZB-2p): input gradients and weight
  // gradients run so far.
  std::vector<int> bRan, wRan;

  size_t idx(int vs, int mb) const { return size_t(vs) * m + mb; }

  /// Runs stage i's next task, or a deferrable W before it.
  Step runNext(int i) {
    const Task &t = order[i][next[i]];
    if (t.deferrable && t.mb < wRan[i])
      return Step::Skipped;
    if (t.weight) {
      runWeight(i, t);
      wRan[i] += t.deferrable;
      return Step::Ran;
    }
    if (wRan[i] < bRan[i] && order[i].back().deferrable) {
      // ZB-2p: a W fills the idle time before a task whose inputs come
      // later, when at least half of it fits there.
      double ready, gather, send;
      if (!inputsOf(t.vs, t.mb, t.backward, ready, gather, send))
        return Step::Blocked;
      double weight = weightS ? (*weightS)[t.vs] : 0;
      if (ready - tl.free[i] > 0 && ready - tl.free[i] >= weight / 2) {
        runWeight(i, {t.vs, wRan[i]++, true, true});
        return Step::Filled;
      }
    }
    bool ran = t.pairVs >= 0 ? runPair(i, t) : runTask(i, t);
    if (ran && t.backward)
      ++bRan[i];
    return ran ? Step::Ran : Step::Blocked;
  }

  /// When the inputs of chunk vs's forward (or backward) of micro-batch mb
  /// have arrived, the gather they need and the send of its result; false
  /// while one has not been produced yet.
  bool inputsOf(int vs, int mb, bool backward, double &ready, double &gather,
                double &send) const {
    ready = gather = send = 0;
    if (!backward) {
      if (vs > 0) {
        ready = fDone[idx(vs - 1, mb)];
        if (ready < 0)
          return false;
        gather = links.gatherFwdS[vs - 1];
      }
      if (vs + 1 < chunks)
        send = links.transferS[vs];
      return true;
    }
    ready = fComputed[idx(vs, mb)];
    if (ready < 0)
      return false;
    if (vs + 1 < chunks) {
      double dep = bDone[idx(vs + 1, mb)];
      if (dep < 0)
        return false;
      ready = std::max(ready, dep);
      gather = links.gatherBwdS[vs];
    }
    if (vs > 0)
      send = links.transferBwdS[vs - 1];
    return true;
  }

  /// The weight gradients of a backward the stage has run: nothing to
  /// wait for, nothing to send.
  void runWeight(int i, const Task &t) {
    double dur = weightS ? (*weightS)[t.vs] : 0;
    double start = tl.free[i];
    tl.free[i] = start + dur;
    tl.busy[i] += dur;
    tl.lastBackwardS[i] = dur;
    if (trace && dur > 0)
      trace->push_back({i, "W" + std::to_string(t.mb), "backward", start, dur});
  }

  /// DualPipeV's pair: a forward and another chunk's full backward at once,
  /// each one's expert all-to-alls hidden behind the other's compute: the
  /// pair takes the longer of the two computes together and the two
  /// all-to-alls together. Both results leave in one exchange.
  bool runPair(int i, const Task &t) {
    int bv = t.pairVs, bm = t.pairMb;
    double readyF, gatherF, sendF, readyB, gatherB, sendB;
    if (!inputsOf(t.vs, t.mb, false, readyF, gatherF, sendF) ||
        !inputsOf(bv, bm, true, readyB, gatherB, sendB))
      return false;
    double fullB = bwdS[bv] + (weightS ? (*weightS)[bv] : 0);
    double commF = fwdCommS ? (*fwdCommS)[t.vs] : 0,
           commB = bwdCommS ? (*bwdCommS)[bv] : 0;
    double dur = std::max(fwdS[t.vs] - commF + fullB - commB, commF + commB);
    double start = std::max({tl.free[i], readyF, readyB});
    double computed = start + gatherF + gatherB + dur;
    double send = std::max(sendF, sendB);
    fComputed[idx(t.vs, t.mb)] = computed;
    fDone[idx(t.vs, t.mb)] = computed + send;
    bDone[idx(bv, bm)] = computed + send;
    tl.free[i] = links.asynchronous ? computed : computed + send;
    tl.busy[i] += dur;
    tl.lastBackwardS[i] = dur;
    if (trace) {
      std::string name = "F" + std::to_string(t.mb) + "." +
                         std::to_string(t.vs / pp) + "&B" + std::to_string(bm) +
                         "." + std::to_string(bv / pp);
      trace->push_back(
          {i, name, "forward+backward", start + gatherF + gatherB, dur});
      if (send > 0)
        trace->push_back({i, name + " send", "p2p", computed, send});
    }
    return true;
  }

  /// A forward or a backward (with its weight gradients when full).
  bool runTask(int i, const Task &t) {
    double ready = 0, gather = 0, send = 0;
    if (!inputsOf(t.vs, t.mb, t.backward, ready, gather, send))
      return false;
    double start = std::max(tl.free[i], ready);
    double dur = t.backward ? bwdS[t.vs] : fwdS[t.vs];
    if (t.full && weightS) // its weight gradients too
      dur += (*weightS)[t.vs];
    double computed = start + gather + dur;
    tl.busy[i] += dur;
    if (!t.backward)
      fComputed[idx(t.vs, t.mb)] = computed;
    if (t.sendsWithNext && !links.asynchronous) {
      pending[i] = {idx(t.vs, t.mb), send};
      tl.free[i] = computed;
      send = 0;
    } else {
      if (pending[i].first != SIZE_MAX) {
        // Both sends at once, to the previous and the next stage.
        send = std::max(send, pending[i].second);
        fDone[pending[i].first] = computed + send;
        pending[i] = {SIZE_MAX, 0.0};
      }
      tl.free[i] = links.asynchronous ? computed : computed + send;
      (t.backward ? bDone : fDone)[idx(t.vs, t.mb)] = computed + send;
    }
    if (t.backward)
      tl.lastBackwardS[i] = dur;
    if (trace)
      traceTask(i, t, start, gather, dur, computed, send);
    return true;
  }

  void traceTask(int i, const Task &t, double start, double gather, double dur,
                 double computed, double send) {
    std::string name = std::string(t.backward ? "B" : "F") +
                       std::to_string(t.mb) +
                       (v > 1 ? "." + std::to_string(t.vs / pp) : "");
    if (gather > 0)
      trace->push_back({i, name + " gather", "p2p", start, gather});
    trace->push_back(
        {i, name, t.backward ? "backward" : "forward", start + gather, dur});
    // The context-parallel transfers run beside the attention they feed;
    // what compute cannot hide is part of the task's time.
    const std::vector<double> &cp =
        t.backward ? links.cpBackwardS : links.cpForwardS;
    if (size_t(t.vs) < cp.size() && cp[t.vs] > 0)
      trace->push_back({i, name + " cp exchange", "cp", start + gather,
                        std::min(cp[t.vs], dur)});
    if (send > 0)
      trace->push_back({i, name + " send", "p2p", computed, send});
  }
};

} // namespace

/// Runs each stage's task list in order; a task starts when its stage is
/// free and its inputs have arrived (when the producing task, which waits
/// for its send, is done).
Timeline runSchedule(const std::vector<std::vector<Task>> &order, int chunks,
                     int m, const std::vector<double> &fwdS,
                     const std::vector<double> &bwdS,
                     const PipelineLinks &links, std::vector<TraceEvent> *trace,
                     const std::vector<double> *weightS,
                     const std::vector<double> *fwdCommS,
                     const std::vector<double> *bwdCommS) {
  return ScheduleRun(order, chunks, m, fwdS, bwdS, links, trace, weightS,
                     fwdCommS, bwdCommS)
      .run();
}

} // namespace detail
} // namespace orrery
