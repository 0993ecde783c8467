//===- PipelineTransfers.cpp - what the pipeline sends between chunks ----===//
//
// Each chunk's boundary tensor goes to the next chunk over the link between
// their stages, and its gradient comes back: Megatron-LM (and DeepSpeed's
// pipeline engine by default) sends 1/tp shards each way and all-gathers
// them at the receiver; DeepSpeed 0.3's engine sends the whole gradient from
// every tp rank, and its GPT pipelines the causal mask beside every
// activation (Assumptions). Context parallelism's sends per chunk ride
// along for the trace.
//
//===----------------------------------------------------------------------===//

#include "Simulation.h"
#include "orrery/CostModel/Collective.h"

namespace orrery {
namespace detail {

/// The [1, 1, s, s] causal mask a DeepSpeed GPT pipeline passes between
/// stages beside the activation, cast to fp16 for NCCL.
static double attentionMaskBytes(const Workload &w) {
  double s = double(w.tokensPerSample);
  return 2 * s * s;
}

PipelineTransfers Simulation::pipelineTransfers(const StepLayout &l,
                                                StepResult &r) const {
  int pp = s.pp, chunks = pp * s.virtualStages;
  PipelineTransfers x;
  PipelineLinks &links = x.links;
  links = PipelineLinks::none(chunks);
  links.asynchronous = s.overlapP2p;
  // What each tensor-parallel rank sends per micro-batch: its shard of the
  // boundary tensor each way, or (Assumptions) the whole gradient back and
  // the causal mask beside the activation.
  x.sendFwdBytes = l.outBytes;
  x.sendBwdBytes = l.outBytes;
  for (int ch = 0; ch + 1 < chunks; ++ch) {
    if (a.pipelineWholeGradients)
      x.sendBwdBytes[ch] = l.outBytes[ch] * at[s.stageOfChunk(ch)].tp;
    if (a.pipelineAttentionMask)
      x.sendFwdBytes[ch] += attentionMaskBytes(w);
  }
  if (s.cp > 1) {
    links.cpForwardS.assign(chunks, 0.0);
    links.cpBackwardS.assign(chunks, 0.0);
    for (int ch = 0; ch < chunks; ++ch)
      for (int layer : l.chunkOf[ch]) {
        const LayerTime &t =
            l.stageTimes(s.stageOfChunk(ch))[l.sequence[layer]];
        links.cpForwardS[ch] += t.forwardCpSendS;
        links.cpBackwardS[ch] += t.backwardCpSendS;
      }
  }
  for (int ch = 0; ch + 1 < chunks && (pp > 1 || dualPipeTurn); ++ch) {
    int from = s.stageOfChunk(ch), to = s.stageOfChunk(ch + 1);
    // The V's turn: the next chunk is on the same stage, or (DualPipe)
    // on its mirror rank, over the link between them.
    if (from == to && !dualPipeTurn)
      continue;
    // Back up the V from stage `from` to to = from - 1 over to's link.
    const GroupShape &link =
        s.vShape() && ch >= pp ? at[to].toNext : at[from].toNext;
    links.transferS[ch] =
        collectiveTime(CollectiveKind::SendRecv, x.sendFwdBytes[ch], link);
    links.transferBwdS[ch] =
        collectiveTime(CollectiveKind::SendRecv, x.sendBwdBytes[ch], link);
    double whole = l.outBytes[ch] * at[from].tp;
    if (!s.sequenceParallel) {
      if (at[to].tp > 1)
        links.gatherFwdS[ch] =
            collectiveTime(CollectiveKind::AllGather, whole, at[to].tpGroup);
      if (at[from].tp > 1)
        links.gatherBwdS[ch] =
            collectiveTime(CollectiveKind::AllGather, whole, at[from].tpGroup);
    }
  }
  for (int ch = 0; ch + 1 < chunks; ++ch)
    r.boundaryBytesPerMicroBatch.push_back(
        x.sendFwdBytes[ch] * at[s.stageOfChunk(ch)].tp +
        x.sendBwdBytes[ch] * (a.pipelineWholeGradients
                                  ? at[s.stageOfChunk(ch + 1)].tp
                                  : at[s.stageOfChunk(ch)].tp));
  return x;
}

} // namespace detail
} // namespace orrery
