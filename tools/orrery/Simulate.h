//===- Simulate.h - the `orrery simulate` report -------------------------===//
#ifndef ORRERY_TOOLS_SIMULATE_H
#define ORRERY_TOOLS_SIMULATE_H

#include "orrery/CostModel/Simulator.h"

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

namespace orrery {
/// The result as JSON; every field name carries its unit.
nlohmann::ordered_json simulateJson(const StepResult &r, const Cluster &c,
                                    const Workload &w);
/// "1.2e+05 J per step (tensor math 71 %, memory-bound 12 %,
/// communication 9 %, waiting 8 %)".
std::string energyText(const EnergyByActivity &e);
/// "fabric       rack 2 nodes 1:1, AI zone 384 nodes 7:1 (source)" for each
/// site with fabric tiers (docs/cluster.md), else nothing.
std::string fabricLines(const Cluster &c);

/// The result as a table for a terminal.
void printSimulation(std::ostream &os, const StepResult &r, const Cluster &c,
                     const Workload &w);
} // namespace orrery

#endif // ORRERY_TOOLS_SIMULATE_H
