//===- PrintableLine.h - untrusted text made one safe line ----------------===//
//
// Control bytes and bytes outside ASCII are escaped (\n, \x1b), a run of
// more than 24 digits is cut ("1234567890...(300 digits)"), and the whole
// line is cut at 500 characters. Header-only and free of LLVM, so the ONNX
// island uses it too.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_PRINTABLELINE_H
#define ORRERY_COSTMODEL_PRINTABLELINE_H

#include <cctype>
#include <cstdio>
#include <string>

namespace orrery {

/// A number as a short line-safe string (printf's %g: "1.25", "1e+68").
inline std::string printableNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

/// `text` as one printable line (see the file comment).
inline std::string printableLine(const std::string &text) {
  constexpr size_t kMaxChars = 500, kMaxDigits = 24;
  std::string out;
  size_t i = 0;
  while (i < text.size() && out.size() < kMaxChars) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (std::isdigit(c)) {
      size_t j = i;
      while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j])))
        ++j;
      if (j - i > kMaxDigits)
        out += text.substr(i, 10) + "...(" + std::to_string(j - i) + " digits)";
      else
        out += text.substr(i, j - i);
      i = j;
      continue;
    }
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else
      out += char(c);
    ++i;
  }
  if (i < text.size())
    out += "...";
  return out;
}

} // namespace orrery

#endif // ORRERY_COSTMODEL_PRINTABLELINE_H
