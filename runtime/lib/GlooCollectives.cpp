//===- GlooCollectives.cpp - one collective of the CPU backend -------------===//
#include "GlooCollectives.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>

#include <algorithm>
#include <cmath>

namespace orrery {
namespace runtime {

void runCollective(const std::shared_ptr<gloo::Context> &ctx,
                   CollectiveKind kind, double bytes, int n, int me,
                   uint32_t tag, Scratch &scratch,
                   std::chrono::milliseconds timeout) {
  size_t elems = size_t(std::max(1.0, std::ceil(bytes / 4)));
  switch (kind) {
  case CollectiveKind::AllReduce: {
    float *buf = scratch.get(scratch.a, elems);
    gloo::AllreduceOptions opts(ctx);
    opts.setOutput(buf, elems);
    opts.setReduceFunction(
        [](void *c, const void *a, const void *b, size_t k) {
          gloo::sum<float>(c, a, b, k);
        });
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo::allreduce(opts);
    break;
  }
  case CollectiveKind::AllGather: {
    size_t each = std::max<size_t>(1, elems / n);
    float *in_ = scratch.get(scratch.a, each),
          *out = scratch.get(scratch.b, each * n);
    gloo::AllgatherOptions opts(ctx);
    opts.setInput(in_, each);
    opts.setOutput(out, each * n);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo::allgather(opts);
    break;
  }
  case CollectiveKind::ReduceScatter: {
    size_t each = std::max<size_t>(1, elems / n);
    float *buf = scratch.get(scratch.a, each * n);
    std::vector<int> counts(n, int(each));
    gloo::ReduceScatterHalvingDoubling<float> rs(ctx, {buf}, int(each * n),
                                                 counts);
    rs.run();
    break;
  }
  case CollectiveKind::AllToAll: {
    size_t each = std::max<size_t>(1, elems / n);
    float *in_ = scratch.get(scratch.a, each * n),
          *out = scratch.get(scratch.b, each * n);
    gloo::AlltoallOptions opts(ctx);
    opts.setInput(in_, each * n);
    opts.setOutput(out, each * n);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo::alltoall(opts);
    break;
  }
  case CollectiveKind::SendRecv: {
    // A neighbour exchange: to the next member, from the previous one.
    float *out = scratch.get(scratch.a, elems),
          *inb = scratch.get(scratch.b, elems);
    auto sendBuf = ctx->createUnboundBuffer(out, elems * 4);
    auto recvBuf = ctx->createUnboundBuffer(inb, elems * 4);
    sendBuf->send((me + 1) % n, tag);
    recvBuf->recv((me + n - 1) % n, tag);
    sendBuf->waitSend(timeout);
    recvBuf->waitRecv(timeout);
    break;
  }
  }
}

} // namespace runtime
} // namespace orrery
