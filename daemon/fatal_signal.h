// SIGBUS in the daemon: a memory-mapped file shrank under it. In practice this
// is SQLite's "<db>-shm" (the WAL index every process maps) truncated or
// replaced by someone else while the daemon used it. The faulting access can
// neither be retried nor skipped safely, so the daemon exits at once with one
// log line naming the file (the database itself is intact: a restart rebuilds
// the index), instead of dying silently with "Bus error".
#pragma once

namespace edgecost::daemon {

// Installs the handler for the whole process. A SIGBUS outside any mapped file
// (a real bug) is logged and then re-raised, so it still dumps core.
void InstallSigbusHandler();

}  // namespace edgecost::daemon
