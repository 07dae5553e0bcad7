// `edgecost serve` as a real child process, and the clients the daemon tests
// call it with: curl (JSON and protobuf bodies) and the C++ client of --remote.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/shell.h"

namespace edgecost::test_support {

// Runs a shell command; returns its stdout and stderr.
inline std::string Shell(const std::string& command) { return testing::RunShell(command).output; }

inline bool Serving(const std::string& socket) {
  return Shell("curl -s --unix-socket " + socket + " http://localhost/healthz") == "ok\n";
}

// Starts `edgecost <args>` with `sysfs_root` as its fake /sys and stderr into
// `log`; waits (bounded) until `socket` answers. Returns the pid.
inline pid_t SpawnServe(const std::vector<std::string>& args, const std::string& socket,
                        const std::filesystem::path& sysfs_root, const std::filesystem::path& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("EDGECOST_SYSFS_ROOT", sysfs_root.c_str(), 1);
    if (FILE* out = std::freopen(log.c_str(), "a", stderr); !out) ::_exit(126);
    std::vector<char*> argv{const_cast<char*>(EDGECOST_BIN)};
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    ::execv(EDGECOST_BIN, argv.data());
    ::_exit(127);
  }
  for (int i = 0; i < 100 && !Serving(socket); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return pid;
}

// Sends `signal` and waits for the exit; returns the wait status.
inline int StopProcess(pid_t pid, int signal = SIGTERM) {
  ::kill(pid, signal);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// A Twirp call over `socket` with a JSON body; returns "<body> <http status>".
inline std::string CallJson(const std::string& socket, const std::string& method, const std::string& json,
                            const std::string& extra = "") {
  return Shell("curl -s -w ' %{http_code}' --unix-socket " + socket + " -H 'Content-Type: application/json' " + extra +
               " -d '" + json + "' http://localhost/twirp/edgecost.v1." + method);
}

// Repeats `poll` (bounded; not a timing assertion) until `done` holds for its answer.
inline std::string PollUntil(const std::function<std::string()>& poll,
                             const std::function<bool(const std::string&)>& done) {
  std::string answer;
  for (int i = 0; i < 1200; ++i) {
    answer = poll();
    if (done(answer)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return answer;
}

}  // namespace edgecost::test_support
