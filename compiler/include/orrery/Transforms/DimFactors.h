//===- DimFactors.h - the dimensions a module's reshapes leave intact -----===//
//
// Upstream sharding propagation and partitioning work on ops whose indexing
// maps are projected permutations; a reshape ([b, s, 768] -> [b, s, 12, 64])
// is none. DimFactors finds, over a whole module, the finest factors of every
// tensor dimension that all its reshapes, splits, transposes, contractions
// and attention heads agree on (768 = 12 x 64 everywhere the hidden size
// meets the heads), so each value can be written with one dimension per
// factor and every reshape becomes the identity.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_TRANSFORMS_DIMFACTORS_H
#define ORRERY_TRANSFORMS_DIMFACTORS_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

#include <string>
#include <vector>

namespace orrery {

class DimFactors {
public:
  /// Unifies the dims of every op in `module`; false with a one-line reason
  /// in `error` when a dimension cannot be factored (a reshape whose sizes do
  /// not divide, a split into unequal parts) or an op has no rule.
  bool build(mlir::ModuleOp module, std::string &error);

  /// The factors of `v`'s dims in order, as canonical factor ids; factors of
  /// size 1 are left out (a unit dim is no dim in the factored form).
  llvm::SmallVector<int> leaves(mlir::Value v);
  /// The factors of dim `d` of `v`.
  llvm::SmallVector<int> leavesOfDim(mlir::Value v, unsigned d);
  int64_t size(int factor) const { return atoms[find(factor)].size; }
  /// `v` with one dim per factor.
  mlir::RankedTensorType factoredType(mlir::Value v);
  /// Factors that are attention heads (key-value groups with grouped-query
  /// attention): where a tensor-parallel split belongs.
  bool isHeads(int factor) const;

  // Building blocks, public for the op rules.
  int newAtom(int64_t size);
  /// A copy: a later dimsOf may grow the map and move what it holds.
  llvm::SmallVector<int> dimsOf(mlir::Value v);
  /// Equates two runs of dims with the same element count, refining either
  /// side's factors until they line up; false if they cannot.
  bool unify(llvm::ArrayRef<int> a, llvm::ArrayRef<int> b);
  bool unifyDim(mlir::Value a, unsigned da, mlir::Value b, unsigned db) {
    return unify({dimsOf(a)[da]}, {dimsOf(b)[db]});
  }
  /// Equates `x`'s dims with `r`'s right-aligned, skipping broadcast unit dims.
  bool unifyBroadcast(mlir::Value x, mlir::Value r);
  void markHeads(int atom) { heads.push_back(atom); }
  /// The leaves of one factor (or of a factor an op rule created: the parts
  /// of a split, the halves RoPE rotates, the query heads per key group).
  llvm::SmallVector<int> leavesOfAtom(int atom);

  /// Factors an op rule made for its own use, by op.
  llvm::DenseMap<mlir::Operation *, int> opAtom;
  /// The part a slice takes of its opAtom (a slice that tiles a dim).
  llvm::DenseMap<mlir::Operation *, int64_t> opIndex;

private:
  struct Atom {
    int64_t size;
    int parent;
    llvm::SmallVector<int> children;
  };
  int find(int a) const;
  void appendLeaves(int a, llvm::SmallVector<int> &out) const;
  bool unifyOp(mlir::Operation *op, std::string &error);
  bool unifySlice(mlir::Operation *op, std::string &error);
  bool unifyContraction(mlir::Operation *op, std::string &error);
  bool unifyParts(mlir::Operation *op, std::string &error);
  bool unifyReduce(mlir::Operation *op, std::string &error);
  bool unifyGather(mlir::Operation *op, std::string &error);
  bool unifyAttention(mlir::Operation *op, std::string &error);

  mutable std::vector<Atom> atoms;
  llvm::DenseMap<mlir::Value, llvm::SmallVector<int>> dims;
  std::vector<int> heads;
};

} // namespace orrery

#endif // ORRERY_TRANSFORMS_DIMFACTORS_H
