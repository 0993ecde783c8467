//===- FuzzSupport.h - what every fuzz target asserts of an error ---------===//
#ifndef ORRERY_TESTS_FUZZ_FUZZSUPPORT_H
#define ORRERY_TESTS_FUZZ_FUZZSUPPORT_H

#include "llvm/Support/Error.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace orrery::fuzz {

/// Aborts (a finding) unless `message` is one non-empty line.
inline void expectOneLine(const std::string &message) {
  if (message.empty() || message.find('\n') != std::string::npos) {
    std::fprintf(stderr, "bad error text: '%s'\n", message.c_str());
    std::abort();
  }
}

/// True when `r` holds a value; otherwise checks its error's text.
template <typename T> bool succeeded(llvm::Expected<T> &r) {
  if (r)
    return true;
  expectOneLine(llvm::toString(r.takeError()));
  return false;
}

} // namespace orrery::fuzz

#endif // ORRERY_TESTS_FUZZ_FUZZSUPPORT_H
