//===- Speculation.h - speculative decoding as engines run it ---*- C++ -*-===//
//
// docs/serving.md, "Speculative decoding". A drafter proposes k tokens for
// each generating request; the target model verifies them in its next step,
// one forward over the last token and the k drafts (1 + k queries a
// request), and keeps the longest run the target agrees with plus one token
// of its own. The tokens a step yields follow from the per-position
// acceptance rates, a stated property of the drafter on the workload, with
// a documented default per method (docs/specdec-sources.md, section 4).
//
// The drafters: an EAGLE or EAGLE-3 head (one decoder layer of the target's
// width and the output head), DeepSeek's multi-token prediction layer (one
// layer of the model's own kind, reused for each draft position), and
// n-gram prompt lookup (on the CPU, no pass on the device). vLLM v1 runs
// the drafter after each verification: a first pass over every token the
// target just computed, then k - 1 passes of one token a request
// (vllm/v1/spec_decode/eagle.py, EagleProposer.propose).
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_SPECULATION_H
#define ORRERY_COSTMODEL_SPECULATION_H

#include "orrery/CostModel/Workload.h"

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace orrery {

struct Speculation {
  enum class Method { None, Eagle, Eagle3, Mtp, Ngram } method = Method::None;
  /// Draft tokens a step proposes (vLLM's num_speculative_tokens,
  /// TensorRT-LLM's max_draft_len, SGLang's speculative_num_steps).
  int k = 0;
  /// The chance the draft at each position is accepted, given every one
  /// before it was (conditional; the last repeats for later positions).
  std::vector<double> acceptance;

  bool on() const { return method != Method::None && k > 0; }
  /// Whether the drafter runs on the device (not n-gram lookup).
  bool draftsOnDevice() const {
    return on() && method != Method::Ngram;
  }
  /// Tokens a generating request gains a step on average: 1 + a1 + a1 a2 +
  /// ... + a1 ... ak (Leviathan et al. 2023, Eq. 1, per position).
  double tokensPerStep() const;
  /// "eagle3 k=3 acceptance 0.72", or "off".
  std::string name() const;
  /// vLLM's --speculative-config method name ("eagle3", "mtp", ...).
  const char *methodName() const;

  /// `off`, or a method (`eagle`, `eagle3`, `mtp`, `ngram`) with optional
  /// `k=` and `acceptance=` (one rate, or rates per position separated by
  /// `/`), comma-separated: `eagle3,k=4,acceptance=0.7`. Defaults per
  /// method: EAGLE-3 k=3 at 0.72 (vLLM's MT-Bench acceptance test on
  /// Llama-3.1-8B, mean acceptance length 2.6), EAGLE k=3 at 0.63
  /// (2.3), MTP k=1 at 0.88, then 0.70 and 0.40 for later positions (the
  /// DeepSeek-V3 report's 85-90 % for the second token; TensorRT-LLM's
  /// acceptance lengths 1.92, 2.58, 2.82 at k = 1, 2, 3), n-gram k=3 at
  /// 0.3 (chat; TensorRT-LLM's Magpie turn 1). Errors name the word.
  static llvm::Expected<Speculation> parse(const std::string &text);
};

/// The layer kind a drafter's pass runs once: for MTP the model's most
/// repeated kind (its MTP layer is one of the model's own), for EAGLE the
/// most repeated dense kind (a Llama-style decoder layer of the target's
/// width), the most repeated kind when every layer is a mixture of experts.
/// -1 when the model has no repeated kind.
int draftLayerKind(const Workload &w, Speculation::Method method);

/// The precision a drafter's layer runs at for a target at `target`:
/// EAGLE and EAGLE-3 heads ship as 16-bit checkpoints of their own; an MTP
/// layer is the model's, at its precision, except in FP4 (NVIDIA's NVFP4
/// checkpoints leave it BF16: TensorRT-LLM tech blog 1's DeepSeek-R1 on
/// B200 lists its MTP layers in BF16 beside NVFP4 experts). FP16 targets'
/// drafters in FP16, the others' in BF16.
Precision draftPrecision(Speculation::Method method, Precision target);

} // namespace orrery

#endif // ORRERY_COSTMODEL_SPECULATION_H
