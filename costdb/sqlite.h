// The SQLite backend of the storage interface (sql.h): the one audited SQLite
// wrapper, with typed binding that cannot silently truncate, and SQLite result
// codes turned into Status values that say what to do. No other code calls
// sqlite3_* directly.
#pragma once

#include <sqlite3.h>
#include <sys/types.h>

#include <optional>
#include <string>

#include "base/status.h"
#include "costdb/sql.h"

namespace edgecost::costdb {

// A damaged database file, with what to do about it.
Status Damaged(const std::string& path, const std::string& detail);

// The process that holds a write lock on the SQLite database at `path`, if the
// kernel says (Linux /proc/locks; read, never opened as a lock file).
std::optional<pid_t> LockHolder(const std::string& path);

}  // namespace edgecost::costdb
