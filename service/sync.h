// Agents that share: what an agent measured on its local database, pushed to a
// central store that every agent writes to and every planner reads from. The push
// is an export limited to what is new since the central store last acknowledged,
// imported there (service/cost_export.h): records identified by content, so a
// push retried after a lost acknowledgement, or by another agent, adds nothing twice.
//
// The marks of what was acknowledged live in the local database (CostDb sync
// marks), per central store and device, and move only after the central store
// committed: an unreachable store loses nothing, it is sent everything not yet
// acknowledged once it is back.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "costdb/costdb.h"
#include "service/cost_export.h"

namespace edgecost::service {

struct SyncOptions {
  // A SQLite central store must exist unless this is set: an unmounted share must not
  // quietly become a new empty store on the agent.
  bool create = false;
  int busy_timeout_ms = 2000;  // how long a write waits for another writer of the central store
  std::function<void(const std::string&)> progress;  // one line per device; may be empty
};

struct PushSummary {
  std::vector<ImportSummary> sent;  // per device with something new
  int up_to_date = 0;               // devices with nothing new since the last acknowledgement
  int Added() const {
    int n = 0;
    for (const ImportSummary& s : sent) n += s.Added();
    return n;
  }
};

// Opens the central store for writing: a postgresql:// URL or a SQLite path. Failures
// say Unavailable, naming the store.
Result<costdb::CostDb> OpenCentralStore(const std::string& central, const SyncOptions& options);

// Sends every measured device of `local` (fingerprints, op costs with their runs, paging,
// calibrations, cost tables, schedules, training runs and the models they name) that the
// central store has not acknowledged. The central store is only opened when there is something to send.
Result<PushSummary> PushToStore(costdb::CostDb& local, const std::string& central, const SyncOptions& options);

// Copies a device's records from the central store into `local` (`db pull`): a host plans
// with a board's costs without reaching the store at each solve.
Result<ImportSummary> PullFromStore(costdb::CostDb& local, const std::string& central, const std::string& device,
                                    const ImportOptions& import, const SyncOptions& options);

// One line: what a push or an import added and what was there already.
std::string DescribeImport(const ImportSummary& summary);

}  // namespace edgecost::service
