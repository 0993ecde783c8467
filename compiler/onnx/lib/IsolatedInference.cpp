//===- IsolatedInference.cpp - ONNX's shape inference in a child process --===//
//
// The child inherits the parsed model (copy-on-write), runs InferShapes,
// writes the top graph's value_info and outputs to a pipe as a serialized GraphProto and
// leaves with _exit (no atexit handlers, no flushing of the parent's
// buffers). The parent reads to end of file, reaps the child, and uses the
// result only when the child exited normally with status 0. The result is
// the same bytes every run, so the output stays deterministic.
//
//===----------------------------------------------------------------------===//

#include "IsolatedInference.h"

#include "onnx/defs/schema.h"
#include "onnx/shape_inference/implementation.h"

#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace orrery::onnx::detail {
namespace {

bool writeAll(int fd, const std::string &bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    done += size_t(n);
  }
  return true;
}

[[noreturn]] void runChild(const ::onnx::ModelProto &parentModel, int fd) {
  // The child's memory is its own copy-on-write image of the parent's, so
  // inference may annotate the model in place.
  auto &model = const_cast<::onnx::ModelProto &>(parentModel);
  // A crash ends the child quietly: default dispositions (a sanitizer's or
  // fuzzer's handler would report the parent's input as a finding) and no
  // stderr of its own.
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
    std::signal(sig, SIG_DFL);
  int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (devnull >= 0)
    ::dup2(devnull, STDERR_FILENO);
  std::string bytes;
  try {
    ::onnx::ShapeInferenceOptions options(/*check_type=*/false,
                                          /*error_mode=*/0,
                                          /*enable_data_propagation=*/true);
    try {
      ::onnx::shape_inference::InferShapes(
          model, ::onnx::OpSchemaRegistry::Instance(), options);
    } catch (const std::exception &) {
      // What it inferred before the error is still usable.
    }
    ::onnx::GraphProto shapes;
    *shapes.mutable_value_info() = model.graph().value_info();
    *shapes.mutable_output() = model.graph().output();
    bytes = shapes.SerializeAsString();
  } catch (...) {
    ::_exit(2);
  }
  ::_exit(writeAll(fd, bytes) ? 0 : 3);
}

} // namespace

bool inferShapesIsolated(const ::onnx::ModelProto &model,
                         ::onnx::GraphProto &shapes) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return false;
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return false;
  }
  if (pid == 0) {
    ::close(fds[0]);
    runChild(model, fds[1]);
  }
  ::close(fds[1]);
  std::string bytes;
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    bytes.append(buffer, size_t(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return false;
  return bytes.size() <= size_t(INT32_MAX) &&
         shapes.ParseFromArray(bytes.data(), int(bytes.size()));
}

} // namespace orrery::onnx::detail
