// One daemon per cost database: jobs are numbered and kept in the database,
// so two daemons serving one file would overwrite each other's jobs. The lock
// is flock(2) on "<db>.lock" beside the database, held for the daemon's life
// and released by the kernel when the process dies, so a crash leaves no stale lock.
// The lock belongs to the file, not to the name it was given: symlinks, "." and
// ".." are resolved first, so every such name of one database finds one lock.
// A PostgreSQL store is locked inside it instead: a session-level advisory lock of its schema,
// held by a connection the lock keeps open.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace edgecost::daemon {

// `db_path` with symlinks (the last one too, even if it points at a file not
// created yet), "." and ".." resolved, as an absolute path; the file need not exist.
std::string ResolvedDbPath(const std::string& db_path);

class DbLock {
 public:
  // Takes the lock or fails with FailedPrecondition naming the holder's pid.
  // `holder` says who holds it in that message ("daemon", or a CLI command
  // changing the database while no daemon runs).
  static Result<DbLock> Acquire(const std::string& db_path, std::string_view holder = "daemon");
  // The pid of the process holding the lock on `db_path`, or 0 if none does;
  // `holder`, if given, gets who it is ("daemon", "jobs").
  static int Holder(const std::string& db_path, std::string* holder = nullptr);

  DbLock(DbLock&& other) noexcept : fd_(other.fd_), store_(std::move(other.store_)) { other.fd_ = -1; }
  DbLock& operator=(DbLock&& other) noexcept;
  DbLock(const DbLock&) = delete;
  DbLock& operator=(const DbLock&) = delete;
  ~DbLock();

 private:
  explicit DbLock(int fd) : fd_(fd) {}
  int fd_ = -1;
  std::shared_ptr<void> store_;  // a PostgreSQL store's connection holding its lock
};

}  // namespace edgecost::daemon
