//===- Speculation.cpp - speculative decoding as engines run it -----------===//
#include "orrery/CostModel/Speculation.h"
#include "orrery/CostModel/PrintableLine.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cmath>
#include <cstdio>
#include <set>

namespace orrery {

double Speculation::tokensPerStep() const {
  if (!on())
    return 1;
  double tokens = 1, reach = 1;
  for (int i = 0; i < k; ++i) {
    double a = acceptance.empty()
                   ? 0
                   : acceptance[std::min(size_t(i), acceptance.size() - 1)];
    reach *= a;
    tokens += reach;
  }
  return tokens;
}

const char *Speculation::methodName() const {
  switch (method) {
  case Method::Eagle:
    return "eagle";
  case Method::Eagle3:
    return "eagle3";
  case Method::Mtp:
    return "mtp";
  case Method::Ngram:
    return "ngram";
  case Method::None:
    break;
  }
  return "off";
}

std::string Speculation::name() const {
  if (!on())
    return "off";
  std::string s = std::string(methodName()) + " k=" + std::to_string(k) +
                  " acceptance ";
  for (size_t i = 0; i < acceptance.size(); ++i) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%s%.3g", i ? "/" : "", acceptance[i]);
    s += buf;
  }
  return s;
}

llvm::Expected<Speculation> Speculation::parse(const std::string &text) {
  auto error = [](const std::string &m) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   printableLine("--speculative: " + m));
  };
  Speculation s;
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(text).split(parts, ',', -1, false);
  if (parts.empty())
    return error("empty (off, or eagle, eagle3, mtp, ngram with k= and "
                 "acceptance=)");
  llvm::StringRef method = parts[0].trim();
  if (method == "off" && parts.size() == 1)
    return s;
  if (method == "eagle") {
    s.method = Method::Eagle;
    s.k = 3;
    s.acceptance = {0.63};
  } else if (method == "eagle3") {
    s.method = Method::Eagle3;
    s.k = 3;
    s.acceptance = {0.72};
  } else if (method == "mtp") {
    s.method = Method::Mtp;
    s.k = 1;
    s.acceptance = {0.88, 0.70, 0.40};
  } else if (method == "ngram") {
    s.method = Method::Ngram;
    s.k = 3;
    s.acceptance = {0.3};
  } else {
    return error("unknown method '" + method.str() +
                 "' (off, eagle, eagle3, mtp, ngram)");
  }
  std::set<std::string> seen;
  for (size_t i = 1; i < parts.size(); ++i) {
    auto [key, value] = parts[i].trim().split('=');
    std::string k = key.trim().str();
    value = value.trim();
    if (!seen.insert(k).second)
      return error(k + " given twice");
    if (k == "k") {
      int64_t v = 0;
      if (value.getAsInteger(10, v) || v < 1 || v > 32)
        return error("k=" + value.str() +
                     ": expected 1 to 32 draft tokens (vLLM's limit)");
      s.k = int(v);
    } else if (k == "acceptance") {
      llvm::SmallVector<llvm::StringRef> rates;
      value.split(rates, '/', -1, false);
      s.acceptance.clear();
      for (llvm::StringRef r : rates) {
        double a = 0;
        if (r.trim().getAsDouble(a) || !std::isfinite(a) || a < 0 || a > 1)
          return error("acceptance=" + value.str() +
                       ": expected rates from 0 to 1, per position "
                       "separated by /");
        s.acceptance.push_back(a);
      }
      if (s.acceptance.empty())
        return error("acceptance: expected a rate from 0 to 1");
    } else {
      return error("unknown key '" + k + "' (k, acceptance)");
    }
  }
  return s;
}

Precision draftPrecision(Speculation::Method method, Precision target) {
  if (method == Speculation::Method::Mtp && !isFp4(target))
    return target;
  return target == Precision::FP16 ? Precision::FP16 : Precision::BF16;
}

int draftLayerKind(const Workload &w, Speculation::Method method) {
  int best = -1, dense = -1;
  for (size_t i = 0; i < w.kinds.size(); ++i) {
    const LayerKind &k = w.kinds[i];
    if (k.count < 2)
      continue;
    if (best < 0 || k.count > w.kinds[size_t(best)].count)
      best = int(i);
    if (k.experts <= 1 &&
        (dense < 0 || k.count > w.kinds[size_t(dense)].count))
      dense = int(i);
  }
  bool eagle = method == Speculation::Method::Eagle ||
               method == Speculation::Method::Eagle3;
  return eagle && dense >= 0 ? dense : best;
}

} // namespace orrery
