//===- Errors.h - one-line errors about untrusted input -------------------===//
//
// Every reader's error is one line that is safe to print
// (PrintableLine.h).
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_ERRORS_H
#define ORRERY_COSTMODEL_ERRORS_H

#include "orrery/CostModel/PrintableLine.h"
#include "llvm/Support/Error.h"

#include <string>

namespace orrery {

/// An llvm::Error whose message is printableLine(message).
inline llvm::Error inputError(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 printableLine(message));
}

/// A broken invariant of Orrery itself (a bug, not the input): a search
/// stops on it instead of reading it as a strategy that does not apply.
class InternalError : public llvm::ErrorInfo<InternalError> {
public:
  inline static char ID = 0;
  explicit InternalError(std::string text) : text(std::move(text)) {}
  void log(llvm::raw_ostream &os) const override { os << text; }
  std::error_code convertToErrorCode() const override {
    return llvm::inconvertibleErrorCode();
  }

private:
  std::string text;
};

inline llvm::Error internalError(const std::string &message) {
  return llvm::make_error<InternalError>(printableLine(message));
}

/// A search's handling of a candidate the simulator refused: a strategy
/// that does not apply is skipped (consumed, false); an internal error is
/// kept in `firstInternal` (when that is still empty) and stops the
/// search (true).
inline bool stopsSearch(llvm::Error e, std::string &firstInternal) {
  bool stop = false;
  llvm::handleAllErrors(
      std::move(e),
      [&](const InternalError &ie) {
        stop = true;
        if (firstInternal.empty())
          firstInternal = ie.message();
      },
      [](const llvm::ErrorInfoBase &) {});
  return stop;
}

} // namespace orrery

#endif // ORRERY_COSTMODEL_ERRORS_H
