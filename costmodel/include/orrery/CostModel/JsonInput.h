//===- JsonInput.h - JSON from a user, parsed strictly --------------------===//
//
// nlohmann::json keeps the last of two equal keys and nests without limit;
// a user's file gets neither: a duplicate key ("sites" twice, the second
// silently winning) and nesting deeper than 64 are errors naming them.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_JSONINPUT_H
#define ORRERY_COSTMODEL_JSONINPUT_H

#include "orrery/CostModel/PrintableLine.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace orrery {

constexpr int kMaxJsonDepth = 64;

/// The document, or a discarded value with `error` set ("not valid JSON",
/// "duplicate key 'sites'", "nested deeper than 64").
inline nlohmann::json parseJsonInput(const std::string &text,
                                     std::string &error) {
  using J = nlohmann::json;
  std::vector<std::set<std::string>> keys;
  std::string problem;
  auto check = [&](int depth, J::parse_event_t event, J &parsed) {
    if (!problem.empty())
      return false;
    if (depth > kMaxJsonDepth) {
      problem = "nested deeper than " + std::to_string(kMaxJsonDepth);
      return false;
    }
    switch (event) {
    case J::parse_event_t::object_start:
      keys.emplace_back();
      break;
    case J::parse_event_t::object_end:
      if (!keys.empty())
        keys.pop_back();
      break;
    case J::parse_event_t::key:
      if (!keys.empty() && parsed.is_string() &&
          !keys.back().insert(parsed.get<std::string>()).second)
        problem =
            "duplicate key '" + printableLine(parsed.get<std::string>()) + "'";
      break;
    default:
      break;
    }
    return problem.empty();
  };
  J doc;
  try {
    doc = J::parse(text, check);
  } catch (const J::parse_error &e) {
    // Where, not nlohmann's own wording: "not valid JSON at byte 212".
    error = problem.empty() ? "not valid JSON at byte " + std::to_string(e.byte)
                            : problem;
    return J(J::value_t::discarded);
  } catch (const J::exception &) {
    // out_of_range 406: a number past a double's range (1e999).
    error = problem.empty() ? "not valid JSON: a number past a double's range"
                            : problem;
    return J(J::value_t::discarded);
  }
  if (!problem.empty()) {
    error = problem;
    return J(J::value_t::discarded);
  }
  if (doc.is_discarded())
    error = "not valid JSON";
  return doc;
}

/// The integer `v` holds, as a T: nlohmann's get<int>() of 1e54 is
/// undefined behaviour, so a value that is not a whole number in T's range
/// throws std::out_of_range (readers report it as a wrong value).
template <typename T> T checkedInteger(const nlohmann::json &v) {
  if (v.is_number_integer() || v.is_number_unsigned()) {
    if (v.is_number_unsigned()) {
      auto u = v.get<uint64_t>();
      if (u > uint64_t(std::numeric_limits<T>::max()))
        throw std::out_of_range("integer out of range");
      return T(u);
    }
    auto i = v.get<int64_t>();
    if (i < int64_t(std::numeric_limits<T>::min()) ||
        i > int64_t(std::numeric_limits<T>::max()))
      throw std::out_of_range("integer out of range");
    return T(i);
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (!(d >= double(std::numeric_limits<T>::min()) &&
          d <= double(std::numeric_limits<T>::max())) ||
        d != std::floor(d))
      throw std::out_of_range("not an integer in range");
    return T(d);
  }
  throw std::invalid_argument("not a number");
}
/// o[key] as a checked T, or `dflt` when absent.
template <typename T>
T checkedIntegerOr(const nlohmann::json &o, const char *key, T dflt) {
  return o.contains(key) ? checkedInteger<T>(o[key]) : dflt;
}
/// An array of checked T.
template <typename T>
std::vector<T> checkedIntegers(const nlohmann::json &a) {
  if (!a.is_array())
    throw std::invalid_argument("not an array");
  std::vector<T> out;
  for (const auto &v : a)
    out.push_back(checkedInteger<T>(v));
  return out;
}

/// "" when every key of object `o` is one of `known` (keys starting with
/// "_" or "$" are comments and schema references); otherwise
/// "KEY: unknown field (known: ...)" for the first other key. A misspelt
/// field would otherwise fall back to its default without a word.
inline std::string unknownField(const nlohmann::json &o,
                                const std::vector<const char *> &known) {
  if (!o.is_object())
    return "";
  for (const auto &item : o.items()) {
    const std::string &key = item.key();
    if (key.empty() || key[0] == '_' || key[0] == '$')
      continue;
    bool ok = false;
    for (const char *k : known)
      ok |= key == k;
    if (!ok) {
      std::string list;
      for (const char *k : known)
        list += (list.empty() ? "" : ", ") + std::string(k);
      return key + ": unknown field (known: " + list + ")";
    }
  }
  return "";
}

} // namespace orrery

#endif // ORRERY_COSTMODEL_JSONINPUT_H
