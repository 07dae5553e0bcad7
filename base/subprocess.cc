#include "base/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

extern char** environ;

namespace edgecost {
namespace {

// Both ends of a pipe, closed on scope exit unless released.
struct Pipe {
  int read = -1, write = -1;
  ~Pipe() {
    if (read >= 0) ::close(read);
    if (write >= 0) ::close(write);
  }
};

// Appends what `fd` has to `into`; false at end of file (or an error other than a retry).
bool Drain(int fd, std::string& into) {
  char buffer[1 << 14];
  const ssize_t n = ::read(fd, buffer, sizeof buffer);
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return false;
  into.append(buffer, static_cast<size_t>(n));
  return true;
}

}  // namespace

std::string SelfExecutable() {
  std::error_code error;
  const std::filesystem::path path = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::string() : path.string();
}

Result<ProcessResult> RunProcess(const std::vector<std::string>& argv,
                                 const std::function<void(const std::string&)>& on_stderr_line,
                                 const std::atomic<bool>* stop) {
  if (argv.empty()) return InvalidArgument("no program to run");
  Pipe out, err;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Unavailable(std::string("pipe: ") + std::strerror(errno));
  out.read = fds[0], out.write = fds[1];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Unavailable(std::string("pipe: ") + std::strerror(errno));
  err.read = fds[0], err.write = fds[1];
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out.write, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err.write, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return Unavailable("could not start " + argv[0] + ": " + std::strerror(spawned));
  ::close(out.write), out.write = -1;
  ::close(err.write), err.write = -1;

  ProcessResult result;
  std::string pending;  // stderr not yet ended by a newline
  bool out_open = true, err_open = true, stopped = false;
  while (out_open || err_open) {
    if (stop && stop->load() && !stopped) {
      ::kill(pid, SIGINT);  // the child stops at its next step and says so
      stopped = true;
    }
    pollfd polled[2] = {{out_open ? out.read : -1, POLLIN, 0}, {err_open ? err.read : -1, POLLIN, 0}};
    if (::poll(polled, 2, 200) < 0 && errno != EINTR) break;
    if (polled[0].revents) out_open = Drain(out.read, result.stdout_text);
    if (polled[1].revents) {
      err_open = Drain(err.read, pending);
      for (size_t end; (end = pending.find('\n')) != std::string::npos; pending.erase(0, end + 1)) {
        if (on_stderr_line) on_stderr_line(pending.substr(0, end));
      }
    }
  }
  if (!pending.empty() && on_stderr_line) on_stderr_line(pending);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Internal(std::string("waitpid: ") + std::strerror(errno));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace edgecost
