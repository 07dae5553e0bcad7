// Another program as a child process: its standard output collected, its standard error handed on
// line by line as it comes (progress), and a stop request passed on as SIGINT. A training run whose
// memory must be its own (profile's in-step steps, the agent's train jobs) runs this way.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"

namespace edgecost {

struct ProcessResult {
  int exit_code = 0;  // 128 + the signal when a signal ended it
  std::string stdout_text;
};

// Runs argv[0] (a path) with `argv`, the environment inherited and stdin from /dev/null. Unavailable
// when it cannot be started. Once `stop` is set the child gets SIGINT, and is waited for.
Result<ProcessResult> RunProcess(const std::vector<std::string>& argv,
                                 const std::function<void(const std::string&)>& on_stderr_line,
                                 const std::atomic<bool>* stop = nullptr);

// The running program's own executable (/proc/self/exe), to start it again as a child.
std::string SelfExecutable();

}  // namespace edgecost
