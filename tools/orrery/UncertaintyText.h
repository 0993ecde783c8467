//===- UncertaintyText.h - a prediction's band as text lines --------------===//
#ifndef ORRERY_TOOLS_UNCERTAINTYTEXT_H
#define ORRERY_TOOLS_UNCERTAINTYTEXT_H

#include "orrery/CostModel/Uncertainty.h"

#include <string>

namespace orrery::cli {

/// "band ..." (p10 / p50 / p90 of the step and what they rest on), the
/// memory band where published runs state it, and one line naming the
/// mechanisms no published run checks; "" when the basis is empty.
std::string uncertaintyLines(const Uncertainty &u);

/// "p10 / p50 / p90 s" of the step, for a report's figures ("" when the
/// basis is empty).
std::string stepBandFigure(const Uncertainty &u);

} // namespace orrery::cli

#endif
