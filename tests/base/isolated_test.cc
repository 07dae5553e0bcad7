// RunIsolated: whatever the work does in its child, the caller gets a Result.
#include "base/isolated.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace edgecost {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

TEST(RunIsolated, ReturnsTheWorksBytes) {
  std::string big(5 << 20, '\0');  // larger than a pipe's buffer, with NULs
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  auto result = RunIsolated([&]() -> Result<std::string> { return big; });
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(*result, big);
  auto empty = RunIsolated([]() -> Result<std::string> { return std::string(); });
  ASSERT_TRUE(empty.ok()) << empty.status().message();
  EXPECT_EQ(*empty, "");
}

TEST(RunIsolated, PassesTheWorksErrorThrough) {
  auto result = RunIsolated([]() -> Result<std::string> { return NotFound("no such model 'x'"); });
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(result.status().message(), "no such model 'x'");
}

// The child works on a copy: what it changes stays in the child.
TEST(RunIsolated, TheParentsMemoryIsUntouched) {
  int value = 1;
  auto result = RunIsolated([&]() -> Result<std::string> {
    value = 2;
    return std::to_string(value);
  });
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(*result, "2");
  EXPECT_EQ(value, 1);
}

TEST(RunIsolated, ASegfaultIsAnError) {
  auto result = RunIsolated([]() -> Result<std::string> {
    volatile int* volatile nowhere = nullptr;  // a store the compiler must emit
    *nowhere = 1;
    return std::string("unreachable");
  });
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), ErrorCode::kInternal);
  EXPECT_EQ(result.status().message(), "crashed (SIGSEGV)");
}

TEST(RunIsolated, AnAbortOrAnExceptionIsAnError) {
  auto aborted = RunIsolated([]() -> Result<std::string> { std::abort(); });
  ASSERT_FALSE(aborted.ok());
  EXPECT_EQ(aborted.status().message(), "crashed (SIGABRT)");
  auto thrown = RunIsolated([]() -> Result<std::string> { throw std::runtime_error("bad input"); });
  ASSERT_FALSE(thrown.ok());
  EXPECT_EQ(thrown.status().code(), ErrorCode::kInternal);
  EXPECT_EQ(thrown.status().message(), "threw an exception (bad input)");
}

TEST(RunIsolated, ALoopIsStoppedByTheCpuLimit) {
  IsolationLimits limits;
  limits.cpu_s = 1;
  auto result = RunIsolated(
      []() -> Result<std::string> {
        volatile uint64_t spins = 0;
        for (;;) spins = spins + 1;
      },
      limits);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), ErrorCode::kDeadlineExceeded);
  EXPECT_EQ(result.status().message(), "used more than 1 s of CPU time");
}

// A child that uses no CPU (a deadlock, a wait) is killed at the wall-clock deadline.
TEST(RunIsolated, ALoopIsKilledAtTheDeadline) {
  IsolationLimits limits;
  limits.cpu_s = 0;
  limits.wall_s = 0.5;
  limits.seccomp = false;  // so that the child may sleep
  auto result = RunIsolated(
      []() -> Result<std::string> {
        for (;;) ::pause();
      },
      limits);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), ErrorCode::kDeadlineExceeded);
  EXPECT_EQ(result.status().message(), "took longer than 0.5 s");
}

TEST(RunIsolated, AllocatingWithoutBoundRunsOutOfTheMemoryLimit) {
  if (kAsan) GTEST_SKIP() << "no memory limit under AddressSanitizer";
  IsolationLimits limits;
  limits.memory_bytes = int64_t{256} << 20;
  auto result = RunIsolated(
      []() -> Result<std::string> {
        std::vector<std::unique_ptr<char[]>> chunks;
        for (int i = 0; i < 4096; ++i) {  // 64 GiB: the limit must come first
          chunks.emplace_back(new char[16 << 20]);
          std::memset(chunks.back().get(), 1, 4096);
        }
        return std::string("allocated 64 GiB");
      },
      limits);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(result.status().message(), "ran out of its 256 MiB memory limit");
}

// What the child tried, and errno for each: "open=EPERM socket=EPERM fork=EPERM".
Result<std::string> TrySystemCalls() {
  std::string out;
  auto note = [&](const char* what, bool failed) {
    out += std::string(out.empty() ? "" : " ") + what + "=" + (failed ? strerrorname_np(errno) : "ok");
  };
  const int fd = ::open("/proc/self/status", O_RDONLY);
  note("open", fd < 0);
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  note("socket", s < 0);
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  note("fork", pid < 0);
  return out;
}

TEST(RunIsolated, SeccompRefusesFilesSocketsAndProcesses) {
  if (!SeccompAvailable()) GTEST_SKIP() << "the kernel has no seccomp filters";
  auto result = RunIsolated(TrySystemCalls);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(*result, "open=EPERM socket=EPERM fork=EPERM");
  // The same work without the filter: the refusals above are the filter's.
  IsolationLimits open;
  open.seccomp = false;
  auto unfiltered = RunIsolated(TrySystemCalls, open);
  ASSERT_TRUE(unfiltered.ok()) << unfiltered.status().message();
  EXPECT_EQ(*unfiltered, "open=ok socket=ok fork=ok");
}

// The daemon calls from many threads at once.
TEST(RunIsolated, ConcurrentCallsGetTheirOwnResults) {
  std::vector<std::thread> threads;
  std::vector<std::string> results(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([i, &results] {
      auto r = RunIsolated([i]() -> Result<std::string> {
        if (i % 2) {
          volatile int* volatile nowhere = nullptr;  // a store the compiler must emit
          *nowhere = i;
        }
        return std::to_string(i);
      });
      results[i] = r.ok() ? *r : r.status().message();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(results[i], i % 2 ? "crashed (SIGSEGV)" : std::to_string(i)) << i;
}

}  // namespace
}  // namespace edgecost
