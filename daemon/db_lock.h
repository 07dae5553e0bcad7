// One daemon per cost database: jobs are numbered and kept in the database,
// so two daemons serving one file would overwrite each other's jobs. The lock
// is flock(2) on "<db>.lock" beside the database, held for the daemon's life
// and released by the kernel when the process dies, so a crash leaves no stale lock.
#pragma once

#include <string>

#include "base/status.h"

namespace edgecost::daemon {

class DbLock {
 public:
  // Takes the lock or fails with FailedPrecondition naming the holder's pid.
  static Result<DbLock> Acquire(const std::string& db_path);
  // The pid of the daemon holding the lock on `db_path`, or 0 if none does.
  static int Holder(const std::string& db_path);

  DbLock(DbLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  DbLock& operator=(DbLock&& other) noexcept;
  DbLock(const DbLock&) = delete;
  DbLock& operator=(const DbLock&) = delete;
  ~DbLock();

 private:
  explicit DbLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace edgecost::daemon
