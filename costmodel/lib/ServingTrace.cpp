//===- ServingTrace.cpp - a serving workload read from a CSV trace
//---------===//
//
// docs/serving.md, "Traces". The header names the columns: arrival_s,
// input_tokens and output_tokens first, then any of prefix_id and
// prefix_tokens (together: the prompt's first prefix_tokens are the shared
// prefix of that name) and session_id (a request of a session seen before
// continues it: its prompt starts with the previous turn's prompt and
// output). An empty cell names no prefix or session.
//
//===----------------------------------------------------------------------===//
#include "orrery/CostModel/PrintableLine.h"
#include "orrery/CostModel/ServingSim.h"

#include "llvm/ADT/StringRef.h"

#include <cmath>
#include <limits>
#include <map>
#include <unordered_map>

namespace orrery {
namespace {

/// A name's 64-bit FNV-1a digest, never 0 (no prefix).
uint64_t nameId(llvm::StringRef name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name)
    h = (h ^ c) * 0x100000001b3ull;
  return h | 1;
}

enum Column {
  ColArrival,
  ColInput,
  ColOutput,
  ColPrefixId,
  ColPrefixTokens,
  ColSession
};

/// The columns the header names, in its order; an error names the first
/// that is not one.
llvm::Expected<std::vector<Column>>
headerColumns(const llvm::SmallVectorImpl<llvm::StringRef> &cells) {
  static const std::map<std::string, Column> known = {
      {"arrival_s", ColArrival},          {"input_tokens", ColInput},
      {"output_tokens", ColOutput},       {"prefix_id", ColPrefixId},
      {"prefix_tokens", ColPrefixTokens}, {"session_id", ColSession}};
  const char *expected =
      "expected the header arrival_s,input_tokens,output_tokens, then any "
      "of prefix_id,prefix_tokens (both) and session_id";
  std::vector<Column> cols;
  std::vector<bool> seen(6, false);
  for (llvm::StringRef c : cells) {
    auto it = known.find(c.trim().str());
    if (it == known.end() || seen[it->second])
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          printableLine(std::string(expected) + ": column '" + c.trim().str() +
                        "' " +
                        (it == known.end() ? "unknown" : "named twice")));
    seen[it->second] = true;
    cols.push_back(it->second);
  }
  if (cols.size() < 3 || cols[0] != ColArrival || cols[1] != ColInput ||
      cols[2] != ColOutput || seen[ColPrefixId] != seen[ColPrefixTokens])
    return llvm::createStringError(llvm::inconvertibleErrorCode(), expected);
  return cols;
}

/// A session's previous turn and the prefix its first turn named.
struct SessionState {
  int64_t last = -1;
  uint64_t prefix = 0;
};

} // namespace

llvm::Expected<ServingWorkload>
ServingWorkload::parseTrace(const std::string &text, const std::string &what) {
  ServingWorkload w;
  w.arrival = Arrival::Trace;
  w.name = what;
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(text).split(lines, '\n', -1, true);
  int lineNo = 0;
  std::vector<Column> cols;
  std::unordered_map<uint64_t, SessionState> sessions;
  double last = -std::numeric_limits<double>::infinity();
  for (llvm::StringRef line : lines) {
    ++lineNo;
    line = line.trim();
    if (line.empty() || line.starts_with("#"))
      continue;
    llvm::SmallVector<llvm::StringRef> cells;
    line.split(cells, ',', -1, true);
    auto at = [&](const std::string &m) {
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          printableLine(what + ":" + std::to_string(lineNo) + ": " + m));
    };
    if (cols.empty()) {
      auto c = headerColumns(cells);
      if (!c)
        return at(llvm::toString(c.takeError()));
      cols = *c;
      continue;
    }
    if (cells.size() != cols.size())
      return at("expected " + std::to_string(cols.size()) + " fields, found " +
                std::to_string(cells.size()));
    ServingRequest r;
    uint64_t session = 0;
    for (size_t i = 0; i < cols.size(); ++i) {
      llvm::StringRef v = cells[i].trim();
      auto tokens = [&](const char *name, int64_t &out,
                        int64_t least) -> llvm::Error {
        if (v.getAsInteger(10, out) || out < least || out > (int64_t(1) << 30))
          return at(std::string(name) + " '" + v.str() + "': expected " +
                    (least > 0 ? "a positive number of tokens"
                               : "a number of tokens, 0 or more"));
        return llvm::Error::success();
      };
      switch (cols[i]) {
      case ColArrival:
        if (v.getAsDouble(r.arrivalS) || !std::isfinite(r.arrivalS) ||
            r.arrivalS < 0)
          return at("arrival_s '" + v.str() +
                    "': expected a time in seconds, 0 or more");
        break;
      case ColInput:
        if (auto e = tokens("input_tokens", r.inputTokens, 1))
          return std::move(e);
        break;
      case ColOutput:
        if (auto e = tokens("output_tokens", r.outputTokens, 1))
          return std::move(e);
        break;
      case ColPrefixId:
        r.prefixId = v.empty() ? 0 : nameId(v);
        break;
      case ColPrefixTokens:
        if (!v.empty())
          if (auto e = tokens("prefix_tokens", r.prefixTokens, 0))
            return std::move(e);
        break;
      case ColSession:
        session = v.empty() ? 0 : nameId(v);
        break;
      }
    }
    if (r.arrivalS < last)
      return at("arrival_s goes back in time (the trace must be in arrival "
                "order)");
    last = r.arrivalS;
    if ((r.prefixId != 0) != (r.prefixTokens > 0))
      return at("prefix_id and prefix_tokens go together (a named prefix of "
                "1 token or more, or neither)");
    if (r.prefixTokens > r.inputTokens)
      return at("prefix_tokens " + std::to_string(r.prefixTokens) +
                ": longer than the prompt (" + std::to_string(r.inputTokens) +
                " tokens)");
    if (session != 0) {
      SessionState &s = sessions[session];
      if (s.last >= 0) {
        const ServingRequest &p = w.trace[size_t(s.last)];
        int64_t history = p.inputTokens + p.outputTokens;
        if (r.inputTokens < history)
          return at("input_tokens " + std::to_string(r.inputTokens) +
                    ": shorter than its session's history (" +
                    std::to_string(history) +
                    " tokens, the previous turn's prompt and output)");
        if (r.prefixId != 0 && r.prefixId != s.prefix)
          return at("prefix_id differs from its session's first turn's (a "
                    "later turn starts with the session's history)");
        r.previousTurn = s.last;
        r.prefixId = 0;
        r.prefixTokens = 0;
      } else {
        s.prefix = r.prefixId;
      }
      s.last = int64_t(w.trace.size());
    }
    w.trace.push_back(r);
    if (w.trace.size() > 10'000'000)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     printableLine(what + ": more than 10 "
                                                          "million requests"));
  }
  if (cols.empty())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        printableLine(what + ": empty trace (expected the header "
                             "arrival_s,input_tokens,output_tokens)"));
  if (w.trace.empty())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        printableLine(what + ": the trace has no requests"));
  w.requests = int64_t(w.trace.size());
  return w;
}

} // namespace orrery
