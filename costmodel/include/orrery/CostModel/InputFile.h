//===- InputFile.h - reading a user's file as untrusted input -------------===//
//
// One reader for every file a user names (models, cluster specs, plans,
// program sets): only regular files (never /dev/zero, a FIFO or a
// directory, which would be read forever or fail obscurely), and at most a
// stated size. Header-only and free of LLVM, so the ONNX island uses it too.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_INPUTFILE_H
#define ORRERY_COSTMODEL_INPUTFILE_H

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/stat.h>

namespace orrery {

/// Largest JSON input (cluster spec, plan, program set) read.
constexpr int64_t kMaxJsonInputBytes = int64_t(1) << 30;

/// Reads `path` into `out`; returns "" or the reason it cannot ("is not a
/// regular file", "is larger than ... bytes", the OS's message).
inline std::string readInputFile(const std::string &path, int64_t maxBytes,
                                 std::string &out) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return std::string("cannot open file: ") + std::strerror(errno);
  if (S_ISDIR(st.st_mode))
    return "is a directory, not a file";
  if (!S_ISREG(st.st_mode))
    return "is not a regular file";
  if (int64_t(st.st_size) > maxBytes)
    return "is larger than " + std::to_string(maxBytes) + " bytes";
  std::ifstream f(path, std::ios::binary);
  if (!f)
    return std::string("cannot open file: ") + std::strerror(errno);
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad())
    return "cannot read file";
  out = ss.str();
  return "";
}

} // namespace orrery

#endif // ORRERY_COSTMODEL_INPUTFILE_H
