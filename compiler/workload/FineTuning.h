//===- FineTuning.h - which weights of each layer train ------------------===//
//
// `--freeze` and `--lora` (docs/finetuning.md) as the workload builder sees
// them: per call of @main, how each of its weight arguments trains, and the
// changes that makes to a layer kind's ops: a frozen weight's contraction
// computes no weight gradient and keeps no input for one, a layer nothing
// before trains computes no backward at all, and a LoRA-adapted linear
// layer gains its two low-rank products.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_WORKLOAD_FINETUNING_H
#define ORRERY_WORKLOAD_FINETUNING_H

#include "orrery/CostModel/Workload.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace orrery {

/// How one layer instance trains.
struct LayerTraining {
  /// Per argument of the call: not a weight, a weight that trains, a
  /// frozen one, a frozen one with a LoRA adapter, a buffer.
  enum Arg : char {
    NotWeight = 'x',
    Trains = 't',
    Frozen = 'f',
    Adapted = 'a',
    Buffer = 'b'
  };
  std::vector<char> args;
  /// Some layer before this one trains, so its input gradient is needed.
  bool needsInputGradient = true;
  /// Whether fine-tuning applies at all (else nothing changes).
  bool active = false;
  /// Some weight of it trains (or carries an adapter).
  bool trains() const;
  /// No weight trains and nothing before it does: no backward at all.
  bool noBackward() const { return active && !trains() && !needsInputGradient; }
  /// Distinguishes instances of one function that train differently.
  std::string key() const;
};

/// Per call of @main, in order: how its weights train under `ft`. An error
/// names a pattern that matches no weight or layer kind, or says that
/// nothing would train.
llvm::Expected<std::vector<LayerTraining>>
layerTraining(mlir::ModuleOp module, mlir::func::FuncOp main,
              const FineTuning &ft);

/// The training of a weighted contraction's weight in `t` (Trains when
/// fine-tuning does not apply or the op has no weight argument).
LayerTraining::Arg weightTraining(mlir::Operation *op, const LayerTraining &t);

/// A contraction whose weight is frozen: its backward computes the input
/// gradient alone (one GEMM reading the result's gradient and the weight,
/// writing the input's), none when `inputGradient` is false.
void freezeContraction(OpCost &c, int64_t weightBytes, bool inputGradient);

/// Appends LoRA's products for the adapted contraction `base` (a linear
/// layer [m, k] x [k, n]) to `kind`: x·A ([k, rank]), (xA)·B ([rank, n])
/// and the sum into the base's result, with their parameters (A replicated
/// under a column-parallel base, B under a row-parallel one), gradients
/// and kept tensors. `split`: 0 replicated, 1 column-, 2 row-parallel.
void addLoraAdapter(LayerKind &kind, const OpCost &base, int rank, int split);

} // namespace orrery

#endif // ORRERY_WORKLOAD_FINETUNING_H
