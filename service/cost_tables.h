// Resolving a cost-table request, shared by the CLI and the daemon: an analytic
// source on a board preset is computed on the fly; a measured device's table
// comes from the cost database.
#pragma once

#include <atomic>
#include <functional>

#include "base/status.h"
#include "costdb/costdb.h"
#include "proto/edgecost.pb.h"
#include "solver/problem.h"
#include "solver/simulator.h"
#include "solver/solve.h"

namespace edgecost::service {

// The default cost source of `train` and `solve` on a measured device: measured-in-step (node
// times inside real training steps) where a table of that source exists for the model, device,
// batch, derivation, trainable and thread count, else measured (ops one at a time).
inline constexpr char kAutoCostSource[] = "auto";

// What `auto` resolves to for `key` (its cost_source is ignored) at `threads` compute threads
// (not 0), and in `why` a line that says which and why.
Result<std::string> AutoCostSource(costdb::CostDb& db, costdb::CostTableKey key, uint32_t threads, std::string* why);

// Empty fields take defaults: device "this"; cost source "measured" for a measured
// device, "poet-flops" for a board preset; derivation graph::kDefaultDerivation;
// trainable "all"; batch size 1. A measured or measured-in-step table is the one of
// request.threads compute threads (0: see profiler::ChooseTableThreads); a thread count
// without a table while others have one is refused, naming them. Cost source "auto": the
// measured-in-step table when there is one at that thread count, else the measured one; the
// table's note begins with which and why. `db` may be null for presets.
Result<v1::CostTable> ResolveCostTable(costdb::CostDb* db, const v1::GetCostTableRequest& request);

// The cost table a schedule request is about: its graph file, or its model on
// its device (asked for as GetCostTable would be, by CostTableRequestFor).
Result<v1::CostTable> CostTableForRequest(costdb::CostDb* db, const v1::ScheduleRequest& request);
v1::GetCostTableRequest CostTableRequestFor(const v1::ScheduleRequest& request);

// Solves a schedule request against its cost table and, with a database, stores
// the request, the table and the schedule when `store` (the schedule's id is
// returned, else 0). Empty fields take defaults: strategy "optimal", 60 s,
// one thread. `stop` ends the search early with the best schedule so far.
// With `min_ram` the smallest RAM budget with a schedule is searched first (half
// the time limit at most) and the schedule is solved there; the returned
// schedule's request carries that budget. With `compare` every baseline and
// greedy are solved too (Schedule.compared). `on_progress` sees the optimum's
// search as it improves. Shared by `edgecost solve` and SolverService.Solve.
struct SolvedRequest {
  v1::CostTable table;
  solver::Problem problem;  // the table and the request's budgets, as solved
  v1::Schedule schedule;
  int64_t schedule_id = 0;
};
Result<SolvedRequest> SolveRequest(costdb::CostDb* db, const v1::ScheduleRequest& request, bool store = true,
                                   const std::atomic<bool>* stop = nullptr,
                                   const std::function<void(const solver::Progress&)>& on_progress = {});

// SolveRequest with the solver in a child process (forked), so that the caller's process holds none
// of the solver's memory: a training process whose peak is its budget. The caller reads and writes
// `db`; the child never touches it. Only where no other thread of the caller may hold a lock (the
// CLI, not the daemon).
Result<SolvedRequest> SolveRequestInChild(costdb::CostDb& db, const v1::ScheduleRequest& request, bool store,
                                          const std::function<void(const solver::Progress&)>& on_progress = {});

// A schedule file as `edgecost solve --out` writes it: the schedule with the
// cost table it was solved on and its graph's hash (portable: no model file or
// database needed to check, trace or train it).
v1::Schedule PortableSchedule(v1::Schedule schedule, const v1::CostTable& table);
Result<v1::Schedule> ReadScheduleFile(const std::string& path);

// A cost table as CSV for spreadsheets and pandas: a header line, then a row per node with plain
// numbers in SI units named in the header (runtime_s, compute_j, ram_bytes, ...), `costs --csv`
// and the web view's download.
std::string CostTableCsv(const v1::CostTable& table);
// One CSV field: quoted when it holds a comma, a quote or a line break, and after a quote mark when it
// starts like a spreadsheet formula (=, +, -, @, a tab or a carriage return), so it reads as text.
std::string CsvField(const std::string& text);
// A number for CSV: every significant digit a double needs to be read back, no unit.
std::string CsvNumber(double value);
// The stored schedules a request names (model, device; empty: all), oldest first: the daemon's
// ListSchedules and `edgecost schedules`.
Result<v1::ListSchedulesResponse> ListSchedules(costdb::CostDb& db, const v1::ListSchedulesRequest& request);
// Stored schedules as CSV, a row per schedule, oldest first: `edgecost schedules --csv` and the
// web view's /schedules.csv. A schedule that failed has an empty energy_j.
std::string SchedulesCsv(const v1::ListSchedulesResponse& listed);

// The cost table a schedule was solved on: the one it carries (refused if its
// graph does not match the hash), or else the one its request names.
Result<v1::CostTable> ScheduleCostTable(costdb::CostDb* db, const v1::Schedule& schedule);

// What `edgecost check` does: a schedule's own request gives its cost table
// and budgets (a measured table needs `db`), and the simulator replays it.
struct CheckedSchedule {
  solver::Problem problem;
  solver::Replay replay;
};
Result<CheckedSchedule> CheckSchedule(costdb::CostDb* db, const v1::Schedule& schedule);

// Stores a cost table. A table that no profiler measured (a board preset, a
// graph file's own costs) gets its device recorded first, as a preset named
// after the board or the file's cost source.
Result<int64_t> StoreCostTable(costdb::CostDb& db, v1::CostTable table);

// The devices of the database, then every board preset it does not hold yet.
Result<v1::ListDevicesResponse> ListDevices(costdb::CostDb& db);

// A stored schedule with the problem it was solved for: the cost table stored
// with it (not a newer one measured since), and the simulator's replay.
struct StoredScheduleView {
  v1::Schedule schedule;
  v1::CostTable table;
  solver::Problem problem;
  solver::Replay replay;
};
Result<StoredScheduleView> LoadStoredSchedule(costdb::CostDb& db, int64_t schedule_id);

// What `edgecost models` and ListModels show for each zoo model.
Result<v1::ListModelsResponse> DescribeZoo(int batch_size);

}  // namespace edgecost::service
