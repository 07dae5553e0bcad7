#include "daemon/db_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

namespace edgecost::daemon {
namespace {

std::string LockPath(const std::string& db_path) { return db_path + ".lock"; }

int ReadPid(int fd) {
  char text[32] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  return n > 0 ? std::atoi(text) : 0;
}

}  // namespace

Result<DbLock> DbLock::Acquire(const std::string& db_path) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(db_path).parent_path(), ec);
  const std::string path = LockPath(db_path);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return PermissionDenied("cannot open " + path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int holder = ReadPid(fd);
    ::close(fd);
    return FailedPrecondition("another edgecost daemon" +
                              (holder ? " (pid " + std::to_string(holder) + ")" : std::string()) + " serves " +
                              db_path + "; stop it, or give this one another --db");
  }
  // The pid only serves the message a second daemon prints: the lock holds without it.
  const std::string pid = std::to_string(::getpid()) + "\n";
  [[maybe_unused]] const bool written =
      ::ftruncate(fd, 0) == 0 && ::pwrite(fd, pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size());
  return DbLock(fd);
}

int DbLock::Holder(const std::string& db_path) {
  const int fd = ::open(LockPath(db_path).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  int holder = 0;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0) holder = std::max(1, ReadPid(fd));
  ::close(fd);
  return holder;
}

DbLock& DbLock::operator=(DbLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

DbLock::~DbLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace edgecost::daemon
