// Work on untrusted input in a child process: a crash, a hang or a memory blow-up
// there becomes an error for the one request instead of taking the caller down.
//
// The child is forked without exec, so it runs the caller's code on a copy of its
// memory: the work must not log or take a lock another thread of the parent may
// have held at the fork (glibc makes malloc safe; initialize lazy statics the work
// uses, such as registries, in the parent before the first call).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"

namespace edgecost {

struct IsolationLimits {
  // Address space the child may map beyond what the parent had mapped at the fork
  // (RLIMIT_AS); 0 for none. Not applied under AddressSanitizer, whose shadow
  // memory reserves terabytes of address space.
  int64_t memory_bytes = int64_t{2} << 30;
  // CPU time (RLIMIT_CPU: SIGXCPU at the limit, SIGKILL a second later); 0 for none.
  int cpu_s = 60;
  // The parent kills the child after this wall-clock time (a child that sleeps or
  // deadlocks uses no CPU time).
  double wall_s = 120;
  // A seccomp filter where the kernel has it: the child may map memory and write its
  // result, and every other system call (open, socket, exec, fork, ...) fails with EPERM.
  bool seccomp = true;
  // More than this from the child is refused (and the child killed).
  int64_t max_result_bytes = int64_t{1} << 30;
};

// Runs `work` in a forked child under `limits` and returns what it returned: its
// bytes, or its error with the code and message it gave. When the child fails
// instead, the error is one of these codes, with a message that reads after the
// name of what ran ("the ONNX importer " + message):
//   kInternal           "crashed (SIGSEGV)", "exited with status 3 without a result"
//   kResourceExhausted  "ran out of its 2 GiB memory limit"
//   kDeadlineExceeded   "took longer than 120 s", "used more than 60 s of CPU time"
//   kUnavailable        the child could not be started (fork or pipe failed)
// so work that is to be told apart from its child's failures returns other codes.
Result<std::string> RunIsolated(const std::function<Result<std::string>()>& work, const IsolationLimits& limits = {});

// Whether RunIsolated can install its seccomp filter on this kernel.
bool SeccompAvailable();

}  // namespace edgecost
