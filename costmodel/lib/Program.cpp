//===- Program.cpp - per-rank programs: text and the static check --------===//
//
// The check runs the set as the runtime would, without running a kernel:
// every queue of every rank (a stream; a pipeline link's direction:
// queueOf) executes its instructions in order, an
// instruction starts when its dependencies are done, a send and its
// receive complete together (a rendezvous, as NCCL's send/recv), a
// collective when every member of its group has reached it. A set that
// stops before its end deadlocks on a real cluster too.
//
//===----------------------------------------------------------------------===//

#include "orrery/CostModel/Program.h"
#include "orrery/CostModel/Errors.h"
#include "orrery/CostModel/JsonInput.h"
#include "orrery/CostModel/Strategy.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

namespace orrery {

static llvm::Error err(const std::string &msg) { return inputError(msg); }

static const std::vector<std::pair<const char *, InstrKind>> kKinds = {
    {"gemm", InstrKind::Gemm},     {"attention", InstrKind::Attention},
    {"kernel", InstrKind::Kernel}, {"collective", InstrKind::Collective},
    {"send", InstrKind::Send},     {"recv", InstrKind::Recv},
    {"wait", InstrKind::Wait},     {"alloc", InstrKind::Alloc},
    {"free", InstrKind::Free},     {"optimizer", InstrKind::Optimizer},
    {"copy", InstrKind::Copy}};
static const std::vector<std::pair<const char *, StreamKind>> kStreams = {
    {"compute", StreamKind::Compute},  {"comm", StreamKind::Comm},
    {"dp", StreamKind::DataParallel},  {"pp-send", StreamKind::PipeSend},
    {"pp-recv", StreamKind::PipeRecv}, {"host-copy", StreamKind::HostCopy}};
static const std::vector<std::pair<const char *, CollectiveKind>> kColls = {
    {"all-reduce", CollectiveKind::AllReduce},
    {"all-gather", CollectiveKind::AllGather},
    {"reduce-scatter", CollectiveKind::ReduceScatter},
    {"all-to-all", CollectiveKind::AllToAll},
    {"neighbour-exchange", CollectiveKind::SendRecv}};
static const std::vector<std::pair<const char *, KernelClass>> kClasses = {
    {"gemm", KernelClass::Gemm},
    {"pointwise", KernelClass::Pointwise},
    {"reduction", KernelClass::Reduction},
    {"random", KernelClass::Random},
    {"attention", KernelClass::Attention}};

template <typename T>
static const char *nameIn(const std::vector<std::pair<const char *, T>> &t,
                          T v) {
  for (const auto &[n, x] : t)
    if (x == v)
      return n;
  return "?";
}

const char *instrKindName(InstrKind k) { return nameIn(kKinds, k); }
const char *streamKindName(StreamKind s) { return nameIn(kStreams, s); }
const char *collectiveKindName(CollectiveKind k) { return nameIn(kColls, k); }
static const char *className(KernelClass c) { return nameIn(kClasses, c); }

static std::string bytesText(double b) {
  char buf[32];
  if (b >= 1 << 30)
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
  else if (b >= 1 << 20)
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1 << 20));
  else if (b >= 1 << 10)
    std::snprintf(buf, sizeof buf, "%.2f KiB", b / (1 << 10));
  else
    std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

/// What an instruction does, without its index, stream or timing.
static std::string describe(const ProgramSet &set, const Instruction &in) {
  char buf[256];
  switch (in.kind) {
  case InstrKind::Gemm:
    std::snprintf(buf, sizeof buf, "gemm %s m=%lld n=%lld k=%lld batch=%lld %s",
                  in.name.c_str(), (long long)in.m, (long long)in.n,
                  (long long)in.k, (long long)in.batch,
                  precisionName(in.precision));
    return buf;
  case InstrKind::Attention:
    std::snprintf(
        buf, sizeof buf,
        "attention %s batch=%lld heads=%lld kv_heads=%lld q=%lld "
        "kv=%lld d=%lld dv=%lld%s%s %s",
        in.backward ? "backward" : "forward", (long long)in.batch,
        (long long)in.heads, (long long)in.kvHeads, (long long)in.qLen,
        (long long)in.kvLen, (long long)in.headDim, (long long)in.valueDim,
        in.causal ? " causal" : "",
        in.window > 0 ? (" window=" + std::to_string(in.window)).c_str() : "",
        precisionName(in.precision));
    return buf;
  case InstrKind::Kernel:
    return "kernel " + in.name + " " + className(in.kernelClass) + " " +
           bytesText(in.bytes);
  case InstrKind::Collective: {
    std::string g = in.group >= 0 && size_t(in.group) < set.groups.size()
                        ? "g" + std::to_string(in.group) + " (" +
                              set.groupNames[in.group] + ")"
                        : "g" + std::to_string(in.group);
    return std::string(collectiveKindName(in.collective)) + " " + g + " " +
           bytesText(in.bytes) + " " + in.name;
  }
  case InstrKind::Send:
    return "send to " + std::to_string(in.peer) + " tag " +
           std::to_string(in.tag) + " " + bytesText(in.bytes) +
           (in.backward ? " gradient" : "");
  case InstrKind::Recv:
    return "recv from " + std::to_string(in.peer) + " tag " +
           std::to_string(in.tag) + " " + bytesText(in.bytes) +
           (in.backward ? " gradient" : "");
  case InstrKind::Wait:
    return "wait " + in.name;
  case InstrKind::Alloc:
    return "alloc #" + std::to_string(in.buffer) + " " + bytesText(in.bytes);
  case InstrKind::Free:
    return "free #" + std::to_string(in.buffer) + " " + bytesText(in.bytes);
  case InstrKind::Optimizer:
    return "optimizer " + in.name + " " + bytesText(in.bytes);
  case InstrKind::Copy:
    return std::string(in.backward ? "copy from host " : "copy to host ") +
           bytesText(in.bytes) + " " + in.name;
  }
  return "?";
}

Queue queueOf(const Instruction &in) {
  Queue q;
  q.stream = in.stream;
  if ((in.stream == StreamKind::PipeSend ||
       in.stream == StreamKind::PipeRecv) &&
      (in.kind == InstrKind::Send || in.kind == InstrKind::Recv)) {
    q.peer = in.peer;
    q.backward = in.backward;
  }
  return q;
}

std::string queueName(const Queue &q) {
  std::string out = streamKindName(q.stream);
  if (q.peer >= 0)
    out += std::string(q.stream == StreamKind::PipeSend ? " to " : " from ") +
           std::to_string(q.peer) +
           (q.backward ? " (gradients)" : " (activations)");
  return out;
}

std::vector<Queue> queuesOf(const Program &p, std::vector<int> *indexOf) {
  std::vector<Queue> out{Queue{}}; // the compute stream first
  std::map<Queue, int> index{{Queue{}, 0}};
  if (indexOf)
    indexOf->assign(p.code.size(), 0);
  for (size_t i = 0; i < p.code.size(); ++i) {
    Queue q = queueOf(p.code[i]);
    auto [it, added] = index.emplace(q, int(out.size()));
    if (added)
      out.push_back(q);
    if (indexOf)
      (*indexOf)[i] = it->second;
  }
  return out;
}

static std::string where(const ProgramSet &set, int rank, int i) {
  const Instruction &in = set.ranks[rank].code[i];
  return "rank " + std::to_string(rank) + " instruction " + std::to_string(i) +
         " (" + describe(set, in) + (in.span.empty() ? "" : ", " + in.span) +
         ")";
}

std::string programText(const ProgramSet &set, int rank) {
  const Program &p = set.ranks[rank];
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "rank %d of %d: %s, replica group %d, stage %d; tp %d/%d, "
                "cp %d/%d, dp %d/%d; schedule %s\n",
                p.rank, set.worldSize, p.device.c_str(), p.replicaGroup,
                p.stage, p.tpRank, p.tp, p.cpRank, p.cp, p.dpRank, p.dp,
                set.schedule.c_str());
  out += buf;
  out += "memory: static " + bytesText(p.staticBytes) + ", predicted peak " +
         bytesText(p.predictedPeakBytes) + "\n";
  out += "groups:";
  for (size_t g = 0; g < set.groups.size(); ++g) {
    if (std::find(set.groups[g].begin(), set.groups[g].end(), rank) ==
        set.groups[g].end())
      continue;
    out += " g" + std::to_string(g) + " " + set.groupNames[g] + " [";
    for (size_t i = 0; i < set.groups[g].size(); ++i)
      out += (i ? " " : "") + std::to_string(set.groups[g][i]);
    out += "]";
  }
  out += "\n";
  for (size_t i = 0; i < p.code.size(); ++i) {
    const Instruction &in = p.code[i];
    std::string deps;
    for (int d : in.deps)
      deps += (deps.empty() ? " after " : ",") + std::to_string(d);
    std::snprintf(buf, sizeof buf, "%6zu %-7s %-7s %s%s  %.2f us\n", i,
                  streamKindName(in.stream), in.span.c_str(),
                  describe(set, in).c_str(), deps.c_str(), in.predictedS * 1e6);
    out += buf;
  }
  return out;
}

namespace {

using P2pKey = std::tuple<int, int, int64_t>; // from, to, tag
/// Where each send and receive is (rank, instruction), and per group and
/// member its collectives in program order.
struct ProgramIndex {
  std::map<P2pKey, std::pair<int, int>> sends, recvs;
  std::vector<std::map<int, std::vector<int>>> collectives;
};

/// Rank r's instructions: references in range, dependencies back in the
/// program; its sends, receives and collectives into the index.
llvm::Error indexProgram(const ProgramSet &set, int r, ProgramIndex &ix) {
  int world = int(set.ranks.size());
  using Key = P2pKey;
  const Program &p = set.ranks[r];
  if (p.rank != r)
    return err("program set: program " + std::to_string(r) + " says rank " +
               std::to_string(p.rank));
  for (int i = 0; i < int(p.code.size()); ++i) {
    const Instruction &in = p.code[i];
    for (int d : in.deps)
      if (d < 0 || d >= i)
        return err(where(set, r, i) + ": depends on instruction " +
                   std::to_string(d) +
                   ", which does not come before it (a cycle)");
    if (in.p2pGroup >= 0) {
      bool ok = (in.kind == InstrKind::Send || in.kind == InstrKind::Recv) &&
                in.p2pGroup <= i && p.code[in.p2pGroup].p2pGroup == in.p2pGroup;
      for (int j = in.p2pGroup; ok && j < i; ++j)
        ok = p.code[j].p2pGroup == in.p2pGroup &&
             queueOf(p.code[j]) == queueOf(in);
      if (!ok)
        return err(where(set, r, i) +
                   ": its send/receive group is not consecutive sends and "
                   "receives on one queue");
    }
    if (in.kind == InstrKind::Send || in.kind == InstrKind::Recv) {
      if (in.peer < 0 || in.peer >= world || in.peer == r)
        return err(where(set, r, i) + ": no such peer");
      bool send = in.kind == InstrKind::Send;
      Key key = send ? Key{r, in.peer, in.tag} : Key{in.peer, r, in.tag};
      auto &table = send ? ix.sends : ix.recvs;
      if (!table.emplace(key, std::make_pair(r, i)).second)
        return err(where(set, r, i) + ": a second " +
                   (send ? "send" : "receive") + " with this peer and tag");
    }
    if (in.kind == InstrKind::Collective) {
      if (in.group < 0 || size_t(in.group) >= set.groups.size())
        return err(where(set, r, i) + ": no such group");
      const auto &members = set.groups[in.group];
      if (std::find(members.begin(), members.end(), r) == members.end())
        return err(where(set, r, i) + ": rank " + std::to_string(r) +
                   " is not in the group");
      ix.collectives[in.group][r].push_back(i);
    }
  }
  return llvm::Error::success();
}

/// Every rank's program indexed.
llvm::Error indexPrograms(const ProgramSet &set, ProgramIndex &ix) {
  ix.collectives.assign(set.groups.size(), {});
  for (int r = 0; r < int(set.ranks.size()); ++r)
    if (auto e = indexProgram(set, r, ix))
      return e;
  for (size_t g = 0; g < set.groups.size(); ++g)
    for (int r : set.groups[g])
      ix.collectives[g][r]; // every member listed, with or without any
  return llvm::Error::success();
}

/// Group g's collectives on rank r, in program order.
const std::vector<int> &collectivesOf(const ProgramIndex &ix, size_t g, int r) {
  static const std::vector<int> none;
  auto it = ix.collectives[g].find(r);
  return it == ix.collectives[g].end() ? none : it->second;
}

/// Rank r enters group g's collectives as rank ref does: the same kinds
/// and bytes in the same order.
llvm::Error sameCollectives(const ProgramSet &set, const ProgramIndex &ix,
                            size_t g, int ref, int r) {
  const std::vector<int> &first = collectivesOf(ix, g, ref);
  const std::vector<int> &mine = collectivesOf(ix, g, r);
  for (size_t c = 0; c < std::max(mine.size(), first.size()); ++c) {
    if (c >= mine.size() || c >= first.size()) {
      int who = c >= mine.size() ? ref : r;
      int idx = c >= mine.size() ? first[c] : mine[c];
      int other = who == r ? ref : r;
      return err(where(set, who, idx) + ": rank " + std::to_string(other) +
                 " never enters collective #" + std::to_string(c) +
                 " of group g" + std::to_string(g));
    }
    const Instruction &a = set.ranks[ref].code[first[c]];
    const Instruction &b = set.ranks[r].code[mine[c]];
    if (a.collective != b.collective || a.bytes != b.bytes)
      return err(where(set, r, mine[c]) + ": collective #" + std::to_string(c) +
                 " of group g" + std::to_string(g) + " is out of order: rank " +
                 std::to_string(ref) + " enters " + where(set, ref, first[c]) +
                 " there");
  }
  return llvm::Error::success();
}

/// Every send has its receive (same bytes, same link) and the reverse;
/// every member enters its group's collectives in the same order. With a
/// focus rank: only the messages it sends or receives, and in each of its
/// groups its collectives against the next member's.
llvm::Error checkMatches(const ProgramSet &set, const ProgramIndex &ix,
                         int focus = -1) {
  const auto &sends = ix.sends, &recvs = ix.recvs;
  auto mine = [focus](const P2pKey &key) {
    return focus < 0 || std::get<0>(key) == focus || std::get<1>(key) == focus;
  };
  for (const auto &[key, at] : sends) {
    if (!mine(key))
      continue;
    auto it = recvs.find(key);
    if (it == recvs.end())
      return err(where(set, at.first, at.second) + ": rank " +
                 std::to_string(std::get<1>(key)) + " has no matching receive");
    const Instruction &s = set.ranks[at.first].code[at.second];
    const Instruction &v = set.ranks[it->second.first].code[it->second.second];
    if (s.bytes != v.bytes)
      return err(where(set, at.first, at.second) + ": its receive (" +
                 where(set, it->second.first, it->second.second) +
                 ") expects " + bytesText(v.bytes));
    if (s.backward != v.backward)
      return err(where(set, at.first, at.second) + ": its receive (" +
                 where(set, it->second.first, it->second.second) +
                 ") is on another link (" + queueName(queueOf(v)) + ")");
  }
  for (const auto &[key, at] : recvs)
    if (mine(key) && !sends.count(key))
      return err(where(set, at.first, at.second) + ": rank " +
                 std::to_string(std::get<0>(key)) + " never sends it");
  for (size_t g = 0; g < set.groups.size(); ++g) {
    const auto &members = set.groups[g];
    auto at = std::find(members.begin(), members.end(), focus);
    if (members.empty() || (focus >= 0 && at == members.end()))
      continue;
    if (focus >= 0) {
      size_t next = (size_t(at - members.begin()) + 1) % members.size();
      if (auto e = sameCollectives(set, ix, g, focus, members[next]))
        return e;
      continue;
    }
    for (int r : members)
      if (auto e = sameCollectives(set, ix, g, members.front(), r))
        return e;
  }
  return llvm::Error::success();
}

/// Rank r's static and live buffers against its predicted peak; every
/// buffer freed.
llvm::Error checkMemory(const ProgramSet &set, int r) {
  const Program &p = set.ranks[r];
  std::map<int, double> live;
  double now = 0, peak = 0;
  for (int i = 0; i < int(p.code.size()); ++i) {
    const Instruction &in = p.code[i];
    if (in.kind == InstrKind::Alloc) {
      if (!live.emplace(in.buffer, in.bytes).second)
        return err(where(set, r, i) + ": buffer already allocated");
      now += in.bytes;
      peak = std::max(peak, now);
      if (p.staticBytes + peak >
          p.predictedPeakBytes + set.memoryAllowanceBytes)
        return err(
            where(set, r, i) + ": holds " + bytesText(p.staticBytes + peak) +
            ", above the predicted peak " + bytesText(p.predictedPeakBytes) +
            " plus the allowance " + bytesText(set.memoryAllowanceBytes));
    } else if (in.kind == InstrKind::Copy && in.buffer == kHeldBuffer) {
      if (in.bytes > p.staticBytes + set.memoryAllowanceBytes)
        return err(where(set, r, i) + ": copies more than the rank holds (" +
                   bytesText(p.staticBytes) + ")");
    } else if (in.kind == InstrKind::Copy && !live.count(in.buffer)) {
      return err(where(set, r, i) + ": copies through a buffer it does not "
                                    "hold");
    } else if (in.kind == InstrKind::Free) {
      auto it = live.find(in.buffer);
      if (it == live.end())
        return err(where(set, r, i) + ": frees a buffer it does not hold");
      now -= it->second;
      live.erase(it);
    }
  }
  if (!live.empty())
    return err("rank " + std::to_string(r) + ": buffer #" +
               std::to_string(live.begin()->first) + " is never freed");
  return llvm::Error::success();
}

/// The programs run with queues in order, rendezvous sends and
/// whole-group collectives: a deadlock names a waiting instruction and
/// what it waits for.
class DeadlockRun {
public:
  DeadlockRun(const ProgramSet &set, const ProgramIndex &ix);
  llvm::Error run();

private:
  struct Rank {
    std::vector<std::vector<int>> streams; ///< per queue (queuesOf)
    std::vector<int> queue;                ///< per instruction
    std::vector<size_t> head;
    std::vector<char> done;
  };
  const ProgramSet &set;
  const ProgramIndex &ix;
  std::vector<Rank> st;
  size_t remaining = 0;
  /// Next collective index per group and member.
  std::vector<std::map<int, size_t>> nextCollective;

  bool atHead(int r, int i) const {
    const Rank &x = st[r];
    int sIdx = x.queue[i];
    return x.head[sIdx] < x.streams[sIdx].size() &&
           x.streams[sIdx][x.head[sIdx]] == i;
  }
  bool ready(int r, int i) const {
    if (!atHead(r, i))
      return false;
    for (int d : set.ranks[r].code[i].deps)
      if (!st[r].done[d])
        return false;
    return true;
  }
  /// A send/receive and the others of its group (consecutive, one stream).
  std::vector<int> batchOf(int r, int i) const {
    const std::vector<Instruction> &code = set.ranks[r].code;
    std::vector<int> out{i};
    int g = code[i].p2pGroup;
    if (g >= 0)
      for (int j = i + 1; j < int(code.size()) && code[j].p2pGroup == g; ++j)
        out.push_back(j);
    return out;
  }
  bool batchReady(int r, const std::vector<int> &members) const {
    if (!atHead(r, members.front()))
      return false;
    for (int j : members)
      for (int dep : set.ranks[r].code[j].deps)
        if (!st[r].done[dep] && (dep < members.front() || dep > members.back()))
          return false;
    return true;
  }
  void finish(int r, int i) {
    st[r].done[i] = 1;
    ++st[r].head[st[r].queue[i]];
    --remaining;
  }
  bool runP2p(int r, int i);
  bool runCollective(int r, int i);
  llvm::Error stuck() const;
};

DeadlockRun::DeadlockRun(const ProgramSet &set, const ProgramIndex &ix)
    : set(set), ix(ix), st(set.ranks.size()),
      nextCollective(set.groups.size()) {
  for (int r = 0; r < int(set.ranks.size()); ++r) {
    const Program &p = set.ranks[r];
    size_t queues = queuesOf(p, &st[r].queue).size();
    st[r].streams.resize(queues);
    st[r].head.assign(queues, 0);
    st[r].done.assign(p.code.size(), 0);
    for (int i = 0; i < int(p.code.size()); ++i)
      st[r].streams[st[r].queue[i]].push_back(i);
    remaining += p.code.size();
  }
}

/// The batches joined by their partners complete together, or none does.
bool DeadlockRun::runP2p(int r, int i) {
  std::vector<std::pair<int, int>> todo{{r, i}}, seen;
  while (!todo.empty()) {
    auto [q, first] = todo.back();
    todo.pop_back();
    if (std::find(seen.begin(), seen.end(), std::make_pair(q, first)) !=
        seen.end())
      continue;
    seen.push_back({q, first});
    std::vector<int> members = batchOf(q, first);
    if (!batchReady(q, members))
      return false;
    for (int j : members) {
      const Instruction &x = set.ranks[q].code[j];
      bool xs = x.kind == InstrKind::Send;
      P2pKey key = xs ? P2pKey{q, x.peer, x.tag} : P2pKey{x.peer, q, x.tag};
      auto other = (xs ? ix.recvs : ix.sends).at(key);
      int of = set.ranks[other.first].code[other.second].p2pGroup;
      todo.push_back({other.first, of >= 0 ? of : other.second});
    }
  }
  for (auto [q, first] : seen)
    for (int j : batchOf(q, first))
      finish(q, j);
  return true;
}

/// Every member at the group's next collective, or none goes.
bool DeadlockRun::runCollective(int r, int i) {
  const Instruction &in = set.ranks[r].code[i];
  const auto &members = set.groups[in.group];
  size_t c = nextCollective[in.group][r];
  for (int q : members)
    if (!ready(q, ix.collectives[in.group].at(q)[c]))
      return false;
  for (int q : members) {
    finish(q, ix.collectives[in.group].at(q)[c]);
    ++nextCollective[in.group][q];
  }
  return true;
}

llvm::Error DeadlockRun::run() {
  while (remaining) {
    bool progress = false;
    for (int r = 0; r < int(st.size()); ++r)
      for (int s = 0; s < int(st[r].streams.size()); ++s) {
        Rank &x = st[r];
        while (x.head[s] < x.streams[s].size()) {
          int i = x.streams[s][x.head[s]];
          if (!ready(r, i))
            break;
          const Instruction &in = set.ranks[r].code[i];
          if (in.kind == InstrKind::Send || in.kind == InstrKind::Recv) {
            if (!runP2p(r, i))
              break;
          } else if (in.kind == InstrKind::Collective) {
            if (!runCollective(r, i))
              break;
          } else {
            finish(r, i);
          }
          progress = true;
        }
      }
    if (!progress)
      return stuck();
  }
  return llvm::Error::success();
}

/// Names a waiting instruction and the rank it waits for: one that waits
/// on another rank first, else one that waits on its own.
llvm::Error DeadlockRun::stuck() const {
  for (int pass = 0; pass < 2; ++pass)
    for (int r = 0; r < int(st.size()); ++r)
      for (int s = 0; s < int(st[r].streams.size()); ++s) {
        const Rank &x = st[r];
        if (x.head[s] >= x.streams[s].size())
          continue;
        int i = x.streams[s][x.head[s]];
        const Instruction &in = set.ranks[r].code[i];
        std::string why;
        bool own = !batchReady(r, batchOf(r, i));
        if (own && pass == 1) {
          for (int d : in.deps)
            if (!st[r].done[d]) {
              why = "its dependency " + std::to_string(d) + " never finishes";
              break;
            }
        } else if (!own &&
                   (in.kind == InstrKind::Send || in.kind == InstrKind::Recv)) {
          why = "rank " + std::to_string(in.peer) + " never reaches its " +
                (in.kind == InstrKind::Send ? "receive" : "send");
        } else if (!own && in.kind == InstrKind::Collective) {
          size_t c = nextCollective[in.group].at(r);
          for (int q : set.groups[in.group])
            if (!ready(q, ix.collectives[in.group].at(q)[c])) {
              why = "rank " + std::to_string(q) + " never enters it";
              break;
            }
        }
        if (!why.empty())
          return err("deadlock: " + where(set, r, i) + " waits: " + why);
      }
  return err("deadlock: no rank can make progress");
}

} // namespace

/// The set's shape: a program per rank, groups named and in range.
static llvm::Error checkShape(const ProgramSet &set) {
  int world = int(set.ranks.size());
  if (world != set.worldSize)
    return err("program set: " + std::to_string(world) + " programs for " +
               std::to_string(set.worldSize) + " ranks");
  if (set.groupNames.size() != set.groups.size())
    return err("program set: groups and their names differ in number");
  for (size_t g = 0; g < set.groups.size(); ++g)
    for (int r : set.groups[g])
      if (r < 0 || r >= world)
        return err("program set: group g" + std::to_string(g) + " names rank " +
                   std::to_string(r) + " of " + std::to_string(world));
  return llvm::Error::success();
}

llvm::Error checkPrograms(const ProgramSet &set) {
  if (auto e = checkShape(set))
    return e;
  for (const Program &p : set.ranks)
    if (!p.lowered)
      return err("program set: rank " + std::to_string(p.rank) +
                 " was not lowered (the whole-set check needs every rank: "
                 "orrery lower without --local-check)");
  ProgramIndex ix;
  if (auto e = indexPrograms(set, ix))
    return e;
  if (auto e = checkMatches(set, ix))
    return e;
  for (int r = 0; r < set.worldSize; ++r)
    if (auto e = checkMemory(set, r))
      return e;
  return DeadlockRun(set, ix).run();
}

llvm::Error checkRank(const ProgramSet &set, int rank) {
  if (auto e = checkShape(set))
    return e;
  if (rank < 0 || rank >= set.worldSize || !set.ranks[rank].lowered)
    return err("program set: rank " + std::to_string(rank) +
               " has no program here");
  ProgramIndex ix;
  ix.collectives.assign(set.groups.size(), {});
  if (auto e = indexProgram(set, rank, ix))
    return e;
  for (int peer : peersToMatch(set, rank)) {
    if (!set.ranks[peer].lowered)
      return err("program set: rank " + std::to_string(rank) +
                 " is checked against rank " + std::to_string(peer) +
                 ", which was not lowered");
    if (auto e = indexProgram(set, peer, ix))
      return e;
  }
  if (auto e = checkMatches(set, ix, rank))
    return e;
  return checkMemory(set, rank);
}

bool ProgramSet::whole() const {
  return std::all_of(ranks.begin(), ranks.end(),
                     [](const Program &p) { return p.lowered; });
}

std::string groupKey(const std::vector<int> &members) {
  uint64_t h = 1469598103934665603ull; // FNV-1a over the ranks' bytes
  for (int r : members)
    for (int b = 0; b < 4; ++b) {
      h ^= uint64_t((uint32_t(r) >> (8 * b)) & 0xff);
      h *= 1099511628211ull;
    }
  char buf[48];
  std::snprintf(buf, sizeof buf, "n%zu-%016llx", members.size(),
                static_cast<unsigned long long>(h));
  return buf;
}

std::vector<int> peersToMatch(const ProgramSet &set, int rank) {
  std::vector<int> out;
  const Program &p = set.ranks[rank];
  for (const Instruction &in : p.code)
    if ((in.kind == InstrKind::Send || in.kind == InstrKind::Recv) &&
        in.peer >= 0 && in.peer < set.worldSize && in.peer != rank)
      out.push_back(in.peer);
  for (const std::vector<int> &members : set.groups) {
    auto at = std::find(members.begin(), members.end(), rank);
    if (at == members.end() || members.size() < 2)
      continue;
    size_t next = (size_t(at - members.begin()) + 1) % members.size();
    out.push_back(members[next]);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

nlohmann::ordered_json programSetJson(const ProgramSet &set) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["schema"] = "orrery-programs";
  j["version"] = 1;
  j["world_size"] = set.worldSize;
  j["schedule"] = set.schedule;
  j["predicted_step_time_s"] = set.predictedStepS;
  j["memory_allowance_bytes"] = set.memoryAllowanceBytes;
  j["pipe_sends"] = set.pipeSends;
  j["ring_sends"] = set.ringSends;
  if (!set.whole())
    j["partial"] = true; // the lowered ranks only
  ordered_json groups = ordered_json::array();
  for (size_t g = 0; g < set.groups.size(); ++g)
    groups.push_back({{"name", set.groupNames[g]}, {"ranks", set.groups[g]}});
  j["groups"] = groups;
  ordered_json ranks = ordered_json::array();
  for (const Program &p : set.ranks) {
    if (!p.lowered)
      continue;
    ordered_json code = ordered_json::array();
    for (const Instruction &in : p.code) {
      ordered_json x = {{"kind", nameIn(kKinds, in.kind)},
                        {"stream", nameIn(kStreams, in.stream)},
                        {"name", in.name},
                        {"span", in.span}};
      switch (in.kind) {
      case InstrKind::Gemm:
        x["m"] = in.m, x["n"] = in.n, x["k"] = in.k, x["batch"] = in.batch;
        x["precision"] = precisionName(in.precision);
        break;
      case InstrKind::Attention:
        x["batch"] = in.batch, x["heads"] = in.heads,
        x["kv_heads"] = in.kvHeads, x["q_len"] = in.qLen,
        x["kv_len"] = in.kvLen, x["head_dim"] = in.headDim,
        x["value_dim"] = in.valueDim, x["causal"] = in.causal,
        x["backward"] = in.backward;
        if (in.window > 0)
          x["window"] = in.window;
        x["precision"] = precisionName(in.precision);
        break;
      case InstrKind::Kernel:
        x["class"] = nameIn(kClasses, in.kernelClass);
        break;
      case InstrKind::Collective:
        x["collective"] = nameIn(kColls, in.collective);
        x["group"] = in.group;
        break;
      case InstrKind::Send:
      case InstrKind::Recv:
        x["peer"] = in.peer, x["tag"] = in.tag;
        if (in.backward)
          x["backward"] = true;
        if (in.p2pGroup >= 0)
          x["p2p_group"] = in.p2pGroup;
        break;
      case InstrKind::Alloc:
      case InstrKind::Free:
        x["buffer"] = in.buffer;
        break;
      case InstrKind::Copy:
        x["from_host"] = in.backward;
        x["buffer"] = in.buffer;
        break;
      default:
        break;
      }
      x["flops"] = in.flops;
      x["bytes"] = in.bytes;
      if (!in.deps.empty())
        x["deps"] = in.deps;
      x["predicted_s"] = in.predictedS;
      code.push_back(std::move(x));
    }
    ranks.push_back({{"rank", p.rank},
                     {"device", p.device},
                     {"replica_group", p.replicaGroup},
                     {"stage", p.stage},
                     {"tp", {p.tpRank, p.tp}},
                     {"cp", {p.cpRank, p.cp}},
                     {"dp", {p.dpRank, p.dp}},
                     {"static_bytes", p.staticBytes},
                     {"predicted_peak_bytes", p.predictedPeakBytes},
                     {"code", std::move(code)}});
  }
  j["ranks"] = std::move(ranks);
  return j;
}

llvm::Expected<ProgramSet> programSetFromJson(const nlohmann::json &j) {
  ProgramSet set;
  std::string at;
  try {
    if (!j.is_object() || j.value("schema", "") != "orrery-programs")
      return err("schema: expected \"orrery-programs\"");
    at = "version";
    if (checkedInteger<int>(j.at("version")) != 1)
      return err("version: only version 1 is known");
    at = "world_size";
    set.worldSize = checkedInteger<int>(j.at("world_size"));
    if (set.worldSize < 1 || set.worldSize > (1 << 20))
      return err("world_size: must be 1 to 1048576");
    at = "schedule";
    set.schedule = j.at("schedule").get<std::string>();
    at = "predicted_step_time_s";
    set.predictedStepS = j.at("predicted_step_time_s").get<double>();
    at = "memory_allowance_bytes";
    set.memoryAllowanceBytes = j.at("memory_allowance_bytes").get<double>();
    for (size_t g = 0; g < j.at("groups").size(); ++g) {
      at = "groups[" + std::to_string(g) + "]";
      set.groupNames.push_back(j["groups"][g].at("name").get<std::string>());
      set.groups.push_back(checkedIntegers<int>(j["groups"][g].at("ranks")));
    }
    bool partial = j.value("partial", false);
    at = "ranks";
    if (partial ? j.at("ranks").size() > size_t(set.worldSize)
                : j.at("ranks").size() != size_t(set.worldSize))
      return err("ranks: " + std::to_string(j["ranks"].size()) +
                 " programs for world_size " + std::to_string(set.worldSize));
    set.ranks.resize(size_t(set.worldSize));
    for (int r = 0; r < set.worldSize; ++r) {
      set.ranks[r].rank = r;
      set.ranks[r].lowered = !partial;
    }
    for (size_t r = 0; r < j["ranks"].size(); ++r) {
      const nlohmann::json &pj = j["ranks"][r];
      std::string base = "ranks[" + std::to_string(r) + "]";
      at = base;
      Program p;
      p.rank = checkedInteger<int>(pj.at("rank"));
      p.device = pj.at("device").get<std::string>();
      p.replicaGroup = checkedInteger<int>(pj.at("replica_group"));
      p.stage = checkedInteger<int>(pj.at("stage"));
      p.tpRank = checkedInteger<int>(pj.at("tp").at(0)),
      p.tp = checkedInteger<int>(pj["tp"].at(1));
      p.cpRank = checkedInteger<int>(pj.at("cp").at(0)),
      p.cp = checkedInteger<int>(pj["cp"].at(1));
      p.dpRank = checkedInteger<int>(pj.at("dp").at(0)),
      p.dp = checkedInteger<int>(pj["dp"].at(1));
      p.staticBytes = pj.at("static_bytes").get<double>();
      p.predictedPeakBytes = pj.at("predicted_peak_bytes").get<double>();
      const nlohmann::json &code = pj.at("code");
      for (size_t i = 0; i < code.size(); ++i) {
        at = base + ".code[" + std::to_string(i) + "]";
        const nlohmann::json &x = code[i];
        Instruction in;
        auto pick = [&](const auto &table, const char *field, auto &out) {
          std::string v = x.at(field).template get<std::string>();
          for (const auto &[n, k] : table)
            if (v == n) {
              out = k;
              return true;
            }
          return false;
        };
        if (!pick(kKinds, "kind", in.kind))
          return err(at + ".kind: unknown");
        if (!pick(kStreams, "stream", in.stream))
          return err(at + ".stream: unknown");
        in.name = x.value("name", "");
        in.span = x.value("span", "");
        in.m = checkedIntegerOr<int64_t>(x, "m", 0),
        in.n = checkedIntegerOr<int64_t>(x, "n", 0),
        in.k = checkedIntegerOr<int64_t>(x, "k", 0),
        in.batch = checkedIntegerOr<int64_t>(x, "batch", 1);
        in.heads = checkedIntegerOr<int64_t>(x, "heads", 0);
        in.kvHeads = checkedIntegerOr<int64_t>(x, "kv_heads", 0);
        in.qLen = checkedIntegerOr<int64_t>(x, "q_len", 0);
        in.kvLen = checkedIntegerOr<int64_t>(x, "kv_len", 0);
        in.headDim = checkedIntegerOr<int64_t>(x, "head_dim", 0);
        in.valueDim = checkedIntegerOr<int64_t>(x, "value_dim", 0);
        in.causal = x.value("causal", false);
        in.window = checkedIntegerOr<int64_t>(x, "window", 0);
        in.backward = x.value(
            in.kind == InstrKind::Copy ? "from_host" : "backward", false);
        if (x.contains("precision")) {
          auto p2 = precisionFromName(x["precision"].get<std::string>());
          if (!p2)
            return err(at + ".precision: unknown");
          in.precision = *p2;
        }
        if (x.contains("class") && !pick(kClasses, "class", in.kernelClass))
          return err(at + ".class: unknown");
        if (x.contains("collective") &&
            !pick(kColls, "collective", in.collective))
          return err(at + ".collective: unknown");
        in.group = checkedIntegerOr<int>(x, "group", -1);
        in.peer = checkedIntegerOr<int>(x, "peer", -1);
        in.tag = checkedIntegerOr<int64_t>(x, "tag", -1);
        in.p2pGroup = checkedIntegerOr<int>(x, "p2p_group", -1);
        in.buffer = checkedIntegerOr<int>(x, "buffer", -1);
        in.flops = x.value("flops", 0.0);
        in.bytes = x.value("bytes", 0.0);
        if (in.m < 0 || in.n < 0 || in.k < 0 || in.batch < 0 || in.bytes < 0 ||
            in.bytes > 1e15 || double(in.m) * in.n > 1e13 ||
            double(in.n) * in.k > 1e13 || double(in.m) * in.k > 1e13)
          return err(at + ": a size out of range");
        if (x.contains("deps"))
          in.deps = checkedIntegers<int>(x["deps"]);
        in.predictedS = x.value("predicted_s", 0.0);
        p.code.push_back(std::move(in));
      }
      int slot = partial ? p.rank : int(r);
      if (slot < 0 || slot >= set.worldSize ||
          (partial && set.ranks[slot].lowered))
        return err(base + ".rank: out of range or listed twice");
      set.ranks[slot] = std::move(p);
    }
    bool anySend = false, anyRing = false;
    for (const Program &p : set.ranks)
      for (const Instruction &in : p.code)
        if (in.kind == InstrKind::Send) {
          anyRing |= in.stream == StreamKind::Comm;
          anySend |= in.stream != StreamKind::Comm;
        }
    at = "pipe_sends";
    set.pipeSends = j.value("pipe_sends", anySend);
    at = "ring_sends";
    set.ringSends = j.value("ring_sends", anyRing);
  } catch (const std::exception &e) {
    return err(at + ": missing or of the wrong type");
  }
  return set;
}

} // namespace orrery
