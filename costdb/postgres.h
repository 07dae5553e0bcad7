// The PostgreSQL backend of the storage interface (sql.h), on libpqxx: a fleet's
// store that many agents write to at once. The costdb/ SQL is translated here
// (`?` to $1.., bytea as hex text), so no caller sees the dialect.
//
// Write transactions take a transaction-scoped advisory lock per schema, so
// writers exclude each other as SQLite's BEGIN IMMEDIATE makes them (readers
// never wait); a lost connection is reported as Unavailable and reopened by
// the next transaction, never silently resumed inside a broken one.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "costdb/sql.h"

namespace edgecost::costdb {

// Whether `location` names a PostgreSQL database (postgresql:// or postgres://) rather than a file.
bool IsPostgresUrl(std::string_view location);

// The URL with its password (user:PASSWORD@ and a password= parameter) replaced by "***":
// what logs, errors and `db info` show.
std::string RedactUrl(std::string_view url);

// Connects, retrying for up to `busy_timeout_ms` while the server refuses connections.
// `read_only` makes every transaction of the session read-only on the server too.
Result<Db> OpenPostgres(const std::string& url, bool read_only, int busy_timeout_ms);

// Takes the session-level advisory lock `name` of the store's schema, held as long as the returned
// connection lives (and released by the server when it ends, so a crash leaves no stale lock):
// one edgecost daemon per store, as the lock file beside an SQLite file makes it. FailedPrecondition
// when another session holds it.
Result<Db> LockPostgresStore(const std::string& url, const std::string& name);

}  // namespace edgecost::costdb
