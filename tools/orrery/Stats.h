//===- Stats.h - the `orrery stats` report --------------------------------===//
#ifndef ORRERY_TOOLS_STATS_H
#define ORRERY_TOOLS_STATS_H

#include "orrery/CostModel/Workload.h"

#include <nlohmann/json.hpp>
#include <ostream>

namespace orrery {
/// The report as JSON; every field name carries its unit.
nlohmann::ordered_json statsJson(const Workload &w,
                                 const std::map<std::string, int64_t> &dims);
/// The report as a table for a terminal.
void printStats(std::ostream &os, const Workload &w,
                const std::map<std::string, int64_t> &dims);
} // namespace orrery

#endif // ORRERY_TOOLS_STATS_H
