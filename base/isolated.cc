#include "base/isolated.h"

#include <fcntl.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>

#if defined(__SANITIZE_ADDRESS__)
#define EDGECOST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EDGECOST_ASAN 1
#endif
#endif

namespace edgecost {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kResultFd = 3;          // the child's end of the pipe, moved here so every other fd can be closed
constexpr int32_t kOutOfMemory = -1;  // frame code: std::bad_alloc in the child

// What the child writes: a header, then `size` bytes (the result, or the error's message).
struct FrameHeader {
  int32_t code;  // ErrorCode of the work's result, or kOutOfMemory
  uint32_t reserved;
  uint64_t size;
};

std::string LimitText(int64_t bytes) {
  constexpr int64_t kMiB = int64_t{1} << 20, kGiB = int64_t{1} << 30;
  if (bytes % kGiB == 0) return std::to_string(bytes / kGiB) + " GiB";
  return std::to_string((bytes + kMiB - 1) / kMiB) + " MiB";
}

std::string SecondsText(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

std::string SignalText(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// Bytes mapped by this process now (the first field of /proc/self/statm, in pages); 0 if unknown.
int64_t MappedBytes() {
  FILE* f = std::fopen("/proc/self/statm", "re");
  if (!f) return 0;
  long long pages = 0;
  const bool read = std::fscanf(f, "%lld", &pages) == 1;
  std::fclose(f);
  return read ? pages * ::sysconf(_SC_PAGESIZE) : 0;
}

// Only what computing in memory needs; everything else fails with EPERM (not a kill, so a
// library that tries to log or read a file takes its error path and the result still comes back).
bool InstallSeccomp() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
  if (!ctx) return false;
  bool ok = true;
  auto allow = [&](int syscall) { ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ALLOW, syscall, 0) == 0; };
  for (int syscall : {SCMP_SYS(brk), SCMP_SYS(munmap), SCMP_SYS(mremap), SCMP_SYS(madvise), SCMP_SYS(exit),
                      SCMP_SYS(exit_group), SCMP_SYS(rt_sigreturn), SCMP_SYS(rt_sigprocmask), SCMP_SYS(rt_sigaction),
                      SCMP_SYS(futex), SCMP_SYS(getpid), SCMP_SYS(gettid), SCMP_SYS(clock_gettime),
                      SCMP_SYS(gettimeofday), SCMP_SYS(sched_yield), SCMP_SYS(restart_syscall)}) {
    allow(syscall);
  }
  // Memory, never executable: a child that was taken over cannot load code.
  for (int syscall : {SCMP_SYS(mmap), SCMP_SYS(mprotect)}) {
    ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ALLOW, syscall, 1, SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0)) == 0;
  }
  // The result, and abort() signalling itself (a crash is then reported as SIGABRT).
  ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(write), 1, SCMP_A0(SCMP_CMP_EQ, kResultFd)) == 0;
  ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1,
                              SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(::getpid()))) == 0;
  ok = ok && seccomp_load(ctx) == 0;  // sets no_new_privs first
  seccomp_release(ctx);
  return ok;
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

void WriteFrame(int32_t code, const std::string& bytes) {
  const FrameHeader header{code, 0, bytes.size()};
  if (!WriteAll(kResultFd, reinterpret_cast<const char*>(&header), sizeof header)) ::_exit(3);
  if (!WriteAll(kResultFd, bytes.data(), bytes.size())) ::_exit(3);
}

[[noreturn]] void RunChild(const std::function<Result<std::string>()>& work, const IsolationLimits& limits,
                           int write_fd, pid_t parent, int64_t mapped_bytes) {
  // The parent's handlers (the daemon's signal pipe, a fuzzer's crash handler) are not the child's.
  for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(4);
  // Only the pipe stays open: the parent's sockets and database are out of reach.
  if (write_fd != kResultFd && ::dup2(write_fd, kResultFd) != kResultFd) ::_exit(5);
  ::syscall(SYS_close_range, kResultFd + 1, ~0U, 0);
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);  // a crash on a hostile input leaves no core file behind
  if (limits.cpu_s > 0) {
    const rlimit cpu{static_cast<rlim_t>(limits.cpu_s), static_cast<rlim_t>(limits.cpu_s) + 1};
    ::setrlimit(RLIMIT_CPU, &cpu);
  }
#ifndef EDGECOST_ASAN
  if (limits.memory_bytes > 0) {
    const rlim_t as = static_cast<rlim_t>(mapped_bytes + limits.memory_bytes);
    const rlimit memory{as, as};
    ::setrlimit(RLIMIT_AS, &memory);
  }
#else
  (void)mapped_bytes;
#endif
  if (limits.seccomp) (void)InstallSeccomp();  // where the kernel has none, the limits above still hold
  try {
    Result<std::string> result = work();
    if (result.ok()) {
      WriteFrame(0, *result);
    } else {
      WriteFrame(static_cast<int32_t>(result.status().code()), result.status().message());
    }
  } catch (const std::bad_alloc&) {
    WriteFrame(kOutOfMemory, "");
  } catch (const std::exception& e) {
    WriteFrame(static_cast<int32_t>(ErrorCode::kInternal), std::string("threw an exception (") + e.what() + ")");
  } catch (...) {
    WriteFrame(static_cast<int32_t>(ErrorCode::kInternal), "threw an exception");
  }
  ::_exit(0);  // no atexit handlers, no stdio flush: those belong to the parent
}

pid_t WaitFor(pid_t pid, int* status, int options) {
  pid_t r;
  do {
    r = ::waitpid(pid, status, options);
  } while (r < 0 && errno == EINTR);
  return r;
}

void Kill(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  WaitFor(pid, &status, 0);
}

}  // namespace

bool SeccompAvailable() { return seccomp_api_get() >= 1; }

Result<std::string> RunIsolated(const std::function<Result<std::string>()>& work, const IsolationLimits& limits) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return Unavailable(std::string("could not start an isolated process (pipe: ") + std::strerror(errno) + ")");
  }
  const int64_t mapped = MappedBytes();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return Unavailable(std::string("could not start an isolated process (fork: ") + std::strerror(error) + ")");
  }
  if (pid == 0) {
    ::close(fds[0]);
    RunChild(work, limits, fds[1], parent, mapped);
  }
  ::close(fds[1]);
  const int in = fds[0];
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits.wall_s));
  const auto timed_out = [&] {
    Kill(pid);
    return Status(ErrorCode::kDeadlineExceeded, "took longer than " + SecondsText(limits.wall_s) + " s");
  };
  // Read until the whole frame is in or the child closes its end (it exits), the deadline passes,
  // or it sends too much. A complete frame ends the read without EOF: a child forked meanwhile by
  // another thread may hold a copy of the write end until it closes its fds.
  const auto complete = [](const std::string& frame) {
    if (frame.size() < sizeof(FrameHeader)) return false;
    FrameHeader header;
    std::memcpy(&header, frame.data(), sizeof header);
    return frame.size() - sizeof header >= header.size;
  };
  std::string frame;
  char buffer[1 << 16];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      ::close(in);
      return timed_out();
    }
    pollfd p{in, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t n = ::read(in, buffer, sizeof buffer);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;
    frame.append(buffer, static_cast<size_t>(n));
    if (static_cast<int64_t>(frame.size()) > limits.max_result_bytes + static_cast<int64_t>(sizeof(FrameHeader))) {
      ::close(in);
      Kill(pid);
      return Internal("sent more than " + LimitText(limits.max_result_bytes) + " of result");
    }
    if (complete(frame)) break;
  }
  ::close(in);
  // The child has written its result or closed the pipe: it is exiting (if not, the deadline holds).
  int status = 0;
  for (auto pause = std::chrono::microseconds(100);;) {
    const pid_t r = WaitFor(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0) return Internal(std::string("could not be waited for (") + std::strerror(errno) + ")");
    if (Clock::now() >= deadline) return timed_out();
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10000));
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    if (sig == SIGXCPU)
      return Status(ErrorCode::kDeadlineExceeded, "used more than " + std::to_string(limits.cpu_s) + " s of CPU time");
    if (sig == SIGKILL) return Internal("was killed (SIGKILL; the system may be out of memory)");
    return Internal("crashed (" + SignalText(sig) + ")");
  }
  const int exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  FrameHeader header{};
  if (exit_code != 0 || frame.size() < sizeof header) {
    return Internal("exited with status " + std::to_string(exit_code) + " without a result");
  }
  std::memcpy(&header, frame.data(), sizeof header);
  if (header.size != frame.size() - sizeof header) return Internal("sent a malformed result");
  std::string bytes = frame.substr(sizeof header);
  if (header.code == 0) return bytes;
  if (header.code == kOutOfMemory)
    return ResourceExhausted("ran out of its " + LimitText(limits.memory_bytes) + " memory limit");
  if (header.code < 0 || header.code > static_cast<int32_t>(ErrorCode::kDataLoss)) {
    return Internal("sent an unknown result code " + std::to_string(header.code));
  }
  return Status(static_cast<ErrorCode>(header.code), std::move(bytes));
}

}  // namespace edgecost
