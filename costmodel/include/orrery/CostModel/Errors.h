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

} // namespace orrery

#endif // ORRERY_COSTMODEL_ERRORS_H
