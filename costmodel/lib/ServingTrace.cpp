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

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <set>
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

llvm::Error traceError(const std::string &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 printableLine(m));
}

/// The requests of a trace as its lines come, whatever their form: arrival
/// order, a shared prefix within the prompt, a session's turns.
class TraceBuilder {
public:
  explicit TraceBuilder(ServingWorkload &w) : w(w) {}
  /// Adds `r` (of `session`, 0: none); an error is the line's message.
  llvm::Error add(ServingRequest r, uint64_t session);
  llvm::Error finish(const std::string &what);

private:
  ServingWorkload &w;
  std::unordered_map<uint64_t, SessionState> sessions;
  double last = -std::numeric_limits<double>::infinity();
};

llvm::Error TraceBuilder::add(ServingRequest r, uint64_t session) {
  if (r.arrivalS < last)
    return traceError("arrival goes back in time (the trace must be in "
                      "arrival order)");
  last = r.arrivalS;
  if ((r.prefixId != 0) != (r.prefixTokens > 0))
    return traceError("prefix_id and prefix_tokens go together (a named "
                      "prefix of 1 token or more, or neither)");
  if (r.prefixTokens > r.inputTokens)
    return traceError("prefix_tokens " + std::to_string(r.prefixTokens) +
                      ": longer than the prompt (" +
                      std::to_string(r.inputTokens) + " tokens)");
  if (session != 0) {
    SessionState &s = sessions[session];
    if (s.last >= 0) {
      const ServingRequest &p = w.trace[size_t(s.last)];
      int64_t history = p.inputTokens + p.outputTokens;
      if (r.inputTokens < history)
        return traceError("input_tokens " + std::to_string(r.inputTokens) +
                          ": shorter than its session's history (" +
                          std::to_string(history) +
                          " tokens, the previous turn's prompt and output)");
      if (r.prefixId != 0 && r.prefixId != s.prefix)
        return traceError("prefix_id differs from its session's first "
                          "turn's (a later turn starts with the session's "
                          "history)");
      if (r.hashIds)
        return traceError("hash_ids on a later turn of a session (its prompt "
                          "starts with the session's history)");
      r.previousTurn = s.last;
      r.prefixId = 0;
      r.prefixTokens = 0;
    } else {
      s.prefix = r.prefixId;
    }
    s.last = int64_t(w.trace.size());
  }
  w.trace.push_back(std::move(r));
  if (w.trace.size() > 10'000'000)
    return traceError("more than 10 million requests");
  return llvm::Error::success();
}

llvm::Error TraceBuilder::finish(const std::string &what) {
  if (w.trace.empty())
    return traceError(what + ": the trace has no requests");
  w.requests = int64_t(w.trace.size());
  return llvm::Error::success();
}

/// A count of tokens in a JSON field: an integer from `least` to 2^30.
llvm::Error jsonTokens(const nlohmann::json &v, const std::string &key,
                       int64_t least, int64_t &out) {
  if (!v.is_number_integer() || v.get<int64_t>() < least ||
      v.get<int64_t>() > (int64_t(1) << 30))
    return traceError(key + " " + v.dump() + ": expected " +
                      (least > 0 ? "a positive number of tokens"
                                 : "a number of tokens, 0 or more"));
  out = v.get<int64_t>();
  return llvm::Error::success();
}

/// A name in a JSON field: a string or an integer (0: none, the empty
/// string or null).
uint64_t jsonName(const nlohmann::json &v) {
  if (v.is_null() || (v.is_string() && v.get<std::string>().empty()))
    return 0;
  return nameId(v.is_string() ? v.get<std::string>() : v.dump());
}

/// One JSON Lines request: Orrery's fields or a Mooncake trace's.
llvm::Error jsonRequest(const nlohmann::json &o, ServingRequest &r,
                        uint64_t &session) {
  if (!o.is_object())
    return traceError("expected a JSON object");
  static const std::set<std::string> known = {
      "arrival_s",     "input_tokens", "output_tokens", "prefix_id",
      "prefix_tokens", "session_id",   "timestamp",     "input_length",
      "output_length", "hash_ids"};
  for (auto it = o.begin(); it != o.end(); ++it)
    if (!known.count(it.key()))
      return traceError("field '" + it.key() +
                        "' unknown (arrival_s or timestamp, input_tokens or "
                        "input_length, output_tokens or output_length, "
                        "prefix_id, prefix_tokens, session_id, hash_ids)");
  auto one = [&](const char *a, const char *b) -> const nlohmann::json * {
    if (o.contains(a) && o.contains(b))
      return nullptr;
    return o.contains(a) ? &o[a] : o.contains(b) ? &o[b] : nullptr;
  };
  const nlohmann::json *arrival = one("arrival_s", "timestamp");
  const nlohmann::json *in = one("input_tokens", "input_length");
  const nlohmann::json *out = one("output_tokens", "output_length");
  if (!arrival || !in || !out)
    return traceError("expected one of arrival_s (s) or timestamp (ms), of "
                      "input_tokens or input_length, of output_tokens or "
                      "output_length");
  if (!arrival->is_number() || !std::isfinite(arrival->get<double>()) ||
      arrival->get<double>() < 0)
    return traceError("arrival " + arrival->dump() +
                      ": expected a time, 0 or more");
  r.arrivalS = arrival->get<double>() * (o.contains("timestamp") ? 1e-3 : 1);
  if (auto e = jsonTokens(*in, "input_tokens", 1, r.inputTokens))
    return e;
  if (auto e = jsonTokens(*out, "output_tokens", 1, r.outputTokens))
    return e;
  if (o.contains("prefix_tokens"))
    if (auto e =
            jsonTokens(o["prefix_tokens"], "prefix_tokens", 0, r.prefixTokens))
      return e;
  r.prefixId = o.contains("prefix_id") ? jsonName(o["prefix_id"]) : 0;
  session = o.contains("session_id") ? jsonName(o["session_id"]) : 0;
  if (o.contains("hash_ids")) {
    const nlohmann::json &h = o["hash_ids"];
    int64_t blocks =
        (r.inputTokens + kTraceHashBlockTokens - 1) / kTraceHashBlockTokens;
    if (!h.is_array() || int64_t(h.size()) > blocks)
      return traceError("hash_ids: expected an array of at most " +
                        std::to_string(blocks) + " ids (one a block of " +
                        std::to_string(kTraceHashBlockTokens) +
                        " prompt tokens)");
    auto ids = std::make_shared<std::vector<uint64_t>>();
    for (const nlohmann::json &id : h) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0)
        return traceError("hash_ids: " + id.dump() +
                          ": expected a non-negative integer");
      ids->push_back(uint64_t(id.get<int64_t>()));
    }
    if (r.prefixId != 0)
      return traceError("hash_ids and prefix_id: name the shared content "
                        "one way");
    r.hashIds = std::move(ids);
  }
  return llvm::Error::success();
}

llvm::Expected<ServingWorkload> parseJsonLines(const std::string &text,
                                               const std::string &what) {
  ServingWorkload w;
  w.arrival = ServingWorkload::Arrival::Trace;
  w.name = what;
  TraceBuilder b(w);
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(text).split(lines, '\n', -1, true);
  int lineNo = 0;
  for (llvm::StringRef line : lines) {
    ++lineNo;
    line = line.trim();
    if (line.empty())
      continue;
    auto at = [&](llvm::Error e) {
      return traceError(what + ":" + std::to_string(lineNo) + ": " +
                        llvm::toString(std::move(e)));
    };
    nlohmann::json o = nlohmann::json::parse(line.str(), nullptr, false);
    if (o.is_discarded())
      return at(traceError("not JSON"));
    ServingRequest r;
    uint64_t session = 0;
    if (auto e = jsonRequest(o, r, session))
      return at(std::move(e));
    if (auto e = b.add(std::move(r), session))
      return at(std::move(e));
  }
  if (auto e = b.finish(what))
    return std::move(e);
  return w;
}

} // namespace

llvm::Expected<ServingWorkload>
ServingWorkload::parseTrace(const std::string &text, const std::string &what) {
  // JSON Lines: the first thing in the file is an object.
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{')
    return parseJsonLines(text, what);
  ServingWorkload w;
  w.arrival = Arrival::Trace;
  w.name = what;
  TraceBuilder b(w);
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(text).split(lines, '\n', -1, true);
  int lineNo = 0;
  std::vector<Column> cols;
  for (llvm::StringRef line : lines) {
    ++lineNo;
    line = line.trim();
    if (line.empty() || line.starts_with("#"))
      continue;
    llvm::SmallVector<llvm::StringRef> cells;
    line.split(cells, ',', -1, true);
    auto at = [&](const std::string &m) {
      return traceError(what + ":" + std::to_string(lineNo) + ": " + m);
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
    if (auto e = b.add(std::move(r), session))
      return at(llvm::toString(std::move(e)));
  }
  if (cols.empty())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        printableLine(what + ": empty trace (expected the header "
                             "arrival_s,input_tokens,output_tokens)"));
  if (auto e = b.finish(what))
    return std::move(e);
  return w;
}

} // namespace orrery
