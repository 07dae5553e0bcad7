// The cost database of one process (a CLI command, or the daemon): checked and
// migrated once, when the store is opened, then a connection per thread that
// asks for one (a CostDb is not shared across threads), opened without checking
// again. Services take the store, not a path, so that every page, RPC and job
// of a process uses the database the process opened. Like a CostDb, it is not
// carried across fork(): a forked child opens its own connection.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "base/status.h"
#include "costdb/costdb.h"

namespace edgecost::costdb {

class Store {
 public:
  // `path` as CostDb::Open takes it (a file or a postgresql:// URL); nothing is opened yet.
  Store(std::string path, OpenMode mode);
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Opens, checks and (read-write) migrates the database, once: after the first success, at once.
  Status Check();
  // This thread's connection, opened on first use (after Check).
  Result<CostDb*> Db();
  // A connection of the caller's own (after Check), for one that must not share this thread's:
  // a record written from callbacks of other work, which may hold a transaction open.
  Result<CostDb> OpenConnection();
  // The file path, or the PostgreSQL URL without its password: safe to print.
  std::string printable_path() const;
  // As given: a URL keeps its password. For a child process, which opens its own.
  const std::string& path() const { return path_; }
  OpenMode mode() const { return mode_; }

 private:
  Status CheckLocked();

  const std::string path_;
  const OpenMode mode_;
  std::mutex mutex_;
  bool checked_ = false;
  std::map<std::thread::id, CostDb> connections_;
};

}  // namespace edgecost::costdb
