//===- GlooCollectives.h - one collective of the CPU backend ---*- C++ -*-===//
//
// A collective as the CPU backend runs it over a Gloo context, with the
// cost model's byte convention (the buffer each rank holds whole: an
// all-gather's output, a reduce-scatter's input); `orrery profile` times
// the same function.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_RUNTIME_LIB_GLOOCOLLECTIVES_H
#define ORRERY_RUNTIME_LIB_GLOOCOLLECTIVES_H

#include "CpuKernels.h"
#include "orrery/CostModel/Collective.h"

#include <gloo/context.h>

#include <chrono>
#include <memory>

namespace orrery {
namespace runtime {

void runCollective(const std::shared_ptr<gloo::Context> &ctx,
                   CollectiveKind kind, double bytes, int groupSize, int me,
                   uint32_t tag, Scratch &scratch,
                   std::chrono::milliseconds timeout);

} // namespace runtime
} // namespace orrery

#endif // ORRERY_RUNTIME_LIB_GLOOCOLLECTIVES_H
