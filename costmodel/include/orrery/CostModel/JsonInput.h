//===- JsonInput.h - JSON from a user, parsed strictly --------------------===//
//
// nlohmann::json keeps the last of two equal keys and nests without limit;
// a user's file gets neither: a duplicate key ("sites" twice, the second
// silently winning) and nesting deeper than 64 are errors naming them.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_JSONINPUT_H
#define ORRERY_COSTMODEL_JSONINPUT_H

#include <nlohmann/json.hpp>

#include <set>
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
        problem = "duplicate key '" + parsed.get<std::string>() + "'";
      break;
    default:
      break;
    }
    return problem.empty();
  };
  J doc = J::parse(text, check, /*allow_exceptions=*/false);
  if (!problem.empty()) {
    error = problem;
    return J(J::value_t::discarded);
  }
  if (doc.is_discarded())
    error = "not valid JSON";
  return doc;
}

} // namespace orrery

#endif // ORRERY_COSTMODEL_JSONINPUT_H
