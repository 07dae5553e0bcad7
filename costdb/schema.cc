// The schema, as forward migrations from an empty file (or an empty PostgreSQL schema).
#include <string>
#include <vector>

#include "costdb/costdb.h"
#include "costdb/internal.h"

namespace edgecost::costdb {
using namespace internal;

namespace {

// Forward migrations: kMigrations[i] takes PRAGMA user_version i to i + 1, each
// in its own transaction. Never edit a released step; append a new one.
// Times are UTC ISO 8601 text; protos are stored whole (deterministic encoding)
// beside the columns that queries filter or sort on.
constexpr const char* kMigrations[] = {
    R"sql(
CREATE TABLE devices (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE CHECK (name <> ''),
  kind TEXT NOT NULL CHECK (kind IN ('preset', 'measured')),
  created_at TEXT NOT NULL
);
CREATE TABLE fingerprints (
  id INTEGER PRIMARY KEY,
  device_id INTEGER NOT NULL REFERENCES devices(id),
  hash TEXT NOT NULL UNIQUE CHECK (hash <> ''),
  fingerprint BLOB NOT NULL,          -- edgecost.v1.Fingerprint
  first_seen_at TEXT NOT NULL,
  superseded_at TEXT                  -- set when the device showed another fingerprint
);
-- A device has at most one current fingerprint.
CREATE UNIQUE INDEX fingerprints_current ON fingerprints(device_id) WHERE superseded_at IS NULL;
CREATE INDEX fingerprints_by_device ON fingerprints(device_id);
CREATE TABLE cost_sources (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE CHECK (name <> '')   -- "poet-flops", "measured", "imported:<tool>"
);
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  fingerprint_id INTEGER NOT NULL REFERENCES fingerprints(id),
  cost_source_id INTEGER NOT NULL REFERENCES cost_sources(id),
  started_at TEXT NOT NULL,
  finished_at TEXT,
  status TEXT NOT NULL CHECK (status IN ('running', 'complete', 'failed', 'cancelled')),
  idle_power_w REAL                   -- NULL when no sensor measured it
);
CREATE INDEX runs_by_fingerprint ON runs(fingerprint_id);
CREATE TABLE op_costs (
  id INTEGER PRIMARY KEY,
  fingerprint_id INTEGER NOT NULL REFERENCES fingerprints(id),
  op_key TEXT NOT NULL CHECK (op_key <> ''),
  run_id INTEGER REFERENCES runs(id), -- provenance; NULL for imported costs
  runtime_median_s REAL NOT NULL,
  runtime_stddev_s REAL NOT NULL,
  runtime_ci95_low_s REAL NOT NULL,
  runtime_ci95_high_s REAL NOT NULL,
  runtime_n INTEGER NOT NULL,
  energy_j REAL NOT NULL,
  dynamic_energy_j REAL NOT NULL,
  idle_power_w REAL NOT NULL,
  energy_source TEXT NOT NULL CHECK (energy_source IN ('unspecified', 'counter', 'integrated', 'estimated')),
  energy_probe TEXT NOT NULL,
  output_bytes INTEGER NOT NULL,
  workspace_bytes INTEGER NOT NULL,
  rss_growth_bytes INTEGER NOT NULL,
  op_cost BLOB NOT NULL,              -- edgecost.v1.OpCost, with the full signature
  measured_at TEXT NOT NULL,
  UNIQUE (fingerprint_id, op_key)
);
CREATE INDEX op_costs_by_run ON op_costs(run_id);
CREATE TABLE paging_costs (
  id INTEGER PRIMARY KEY,
  fingerprint_id INTEGER NOT NULL REFERENCES fingerprints(id),
  storage_path TEXT NOT NULL CHECK (storage_path <> ''),
  page_out_latency_s REAL NOT NULL,
  page_out_throughput_bytes_per_s REAL NOT NULL,
  page_in_latency_s REAL NOT NULL,
  page_in_throughput_bytes_per_s REAL NOT NULL,
  page_out_power_w REAL NOT NULL,
  page_in_power_w REAL NOT NULL,
  energy_source TEXT NOT NULL CHECK (energy_source IN ('unspecified', 'counter', 'integrated', 'estimated')),
  paging_cost BLOB NOT NULL,          -- edgecost.v1.PagingCost
  measured_at TEXT NOT NULL,
  UNIQUE (fingerprint_id, storage_path)
);
CREATE TABLE models (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL CHECK (name <> ''),
  derivation TEXT NOT NULL,
  trainable TEXT NOT NULL,
  batch_size INTEGER NOT NULL,
  node_count INTEGER NOT NULL,
  param_bytes INTEGER NOT NULL,
  graph BLOB NOT NULL,                -- edgecost.v1.TrainingGraph
  created_at TEXT NOT NULL,
  superseded_at TEXT                  -- set when a different graph was stored for the same key
);
CREATE UNIQUE INDEX models_current ON models(name, derivation, trainable, batch_size)
  WHERE superseded_at IS NULL;
CREATE TABLE cost_tables (
  id INTEGER PRIMARY KEY,
  model_id INTEGER NOT NULL REFERENCES models(id),
  fingerprint_id INTEGER NOT NULL REFERENCES fingerprints(id),
  cost_source_id INTEGER NOT NULL REFERENCES cost_sources(id),
  note TEXT NOT NULL,
  paging BLOB,                        -- edgecost.v1.PagingCost behind page_in_j/page_out_j
  created_at TEXT NOT NULL,
  superseded_at TEXT                  -- set when a newer table for the same key was stored
);
CREATE INDEX cost_tables_by_key ON cost_tables(model_id, fingerprint_id, cost_source_id);
CREATE UNIQUE INDEX cost_tables_current ON cost_tables(model_id, fingerprint_id, cost_source_id)
  WHERE superseded_at IS NULL;
CREATE TABLE node_costs (
  cost_table_id INTEGER NOT NULL REFERENCES cost_tables(id) ON DELETE CASCADE,
  node INTEGER NOT NULL CHECK (node >= 0),
  runtime_s REAL NOT NULL,
  compute_j REAL NOT NULL,
  ram_bytes INTEGER NOT NULL,
  page_in_j REAL NOT NULL,
  page_out_j REAL NOT NULL,
  op_key TEXT NOT NULL,               -- empty when the cost is analytic
  PRIMARY KEY (cost_table_id, node)
) WITHOUT ROWID;
CREATE TABLE schedule_requests (
  id INTEGER PRIMARY KEY,
  model TEXT NOT NULL,                -- zoo model name, or the graph file
  device TEXT NOT NULL,
  cost_source TEXT NOT NULL,
  request BLOB NOT NULL UNIQUE,       -- edgecost.v1.ScheduleRequest; equal requests, equal bytes
  created_at TEXT NOT NULL
);
CREATE INDEX schedule_requests_by_model ON schedule_requests(model, device);
CREATE INDEX schedule_requests_by_device ON schedule_requests(device);
CREATE TABLE schedules (
  id INTEGER PRIMARY KEY,
  request_id INTEGER NOT NULL REFERENCES schedule_requests(id),
  cost_table_id INTEGER REFERENCES cost_tables(id),
  status INTEGER NOT NULL,            -- edgecost.v1.Schedule.Status number
  energy_j REAL NOT NULL,
  schedule BLOB NOT NULL,             -- edgecost.v1.Schedule
  created_at TEXT NOT NULL,
  superseded_at TEXT                  -- set when the request was solved again
);
CREATE INDEX schedules_by_request ON schedules(request_id);
CREATE INDEX schedules_by_cost_table ON schedules(cost_table_id);
)sql",
    // 1 -> 2: the daemon's jobs, so that a restart keeps their history and resumes the unfinished.
    R"sql(
CREATE TABLE jobs (
  id INTEGER PRIMARY KEY,
  kind TEXT NOT NULL,                 -- "profile", "regenerate"
  state INTEGER NOT NULL,             -- edgecost.v1.Job.State number
  job BLOB NOT NULL,                  -- edgecost.v1.Job
  profile_request BLOB NOT NULL,      -- edgecost.v1.StartProfileRequest; empty for other kinds
  updated_at TEXT NOT NULL
);
)sql",
    // 2 -> 3: training run records, a schedule's predictions held against real steps.
    R"sql(
CREATE TABLE train_runs (
  id INTEGER PRIMARY KEY,
  model TEXT NOT NULL,
  device TEXT NOT NULL,
  schedule_id INTEGER,                -- the schedule run, when it was a stored one
  run BLOB NOT NULL,                  -- edgecost.v1.TrainRun
  created_at TEXT NOT NULL
);
CREATE INDEX train_runs_by_model ON train_runs(model, device);
)sql",
    // 3 -> 4: performance counters per op (also in op_costs.op_cost; here for queries), and
    // counter-based energy models fitted against a measured source, per fingerprint.
    R"sql(
CREATE TABLE op_counters (
  fingerprint_id INTEGER NOT NULL REFERENCES fingerprints(id),
  op_key TEXT NOT NULL,
  event TEXT NOT NULL,                -- "cycles", "task-clock", ...
  per_execution REAL NOT NULL,        -- scaled for multiplexing; only counted events have a row
  running_fraction REAL NOT NULL,
  PRIMARY KEY (fingerprint_id, op_key, event)
) WITHOUT ROWID;
CREATE TABLE energy_calibrations (
  id INTEGER PRIMARY KEY,
  fingerprint_id INTEGER NOT NULL REFERENCES fingerprints(id),
  probe TEXT NOT NULL,
  calibrated_at TEXT NOT NULL,
  relative_error REAL NOT NULL,
  calibration BLOB NOT NULL           -- edgecost.v1.EnergyCalibration
);
CREATE INDEX energy_calibrations_by_fingerprint ON energy_calibrations(fingerprint_id, calibrated_at);
)sql",
    // 4 -> 5: energy per op per domain of the measuring probe (also in op_costs.op_cost; here
    // for queries). Rows with `inside` set are nested in another domain and not in the totals.
    R"sql(
CREATE TABLE op_domain_energy (
  fingerprint_id INTEGER NOT NULL REFERENCES fingerprints(id),
  op_key TEXT NOT NULL,
  domain TEXT NOT NULL,               -- "package-0", "dram", "VDD_CPU", "battery", ...
  inside TEXT NOT NULL,               -- the domain that includes this one; '' for a top-level domain
  energy_j REAL NOT NULL,             -- per execution
  idle_power_w REAL NOT NULL,
  dynamic_energy_j REAL NOT NULL,     -- energy_j minus idle_power_w x runtime
  PRIMARY KEY (fingerprint_id, op_key, domain)
) WITHOUT ROWID;
)sql",
    // 5 -> 6: models imported once (`edgecost models add`, CostService.AddModel) and named like zoo models.
    R"sql(
CREATE TABLE model_records (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE CHECK (name <> ''),
  kind TEXT NOT NULL CHECK (kind IN ('onnx', 'training-graph', 'node-link')),
  content_hash TEXT NOT NULL CHECK (content_hash <> ''),
  size_bytes INTEGER NOT NULL,
  bytes BLOB NOT NULL,                -- the file as imported
  added_at TEXT NOT NULL
);
)sql",
    // 6 -> 7: what a listing shows of a stored model, kept beside it so that listing never imports it
    // again; and a counter that every write to what a cost table is read from bumps, under which the
    // daemon keeps encoded tables read from the database (any process's write, by the triggers).
    // node_costs has none: its rows are only written with their cost_tables row.
    R"sql(
ALTER TABLE model_records ADD COLUMN summary BLOB;  -- edgecost.v1.ModelInfo of its graph; NULL until computed
CREATE TABLE change_counters (
  name TEXT PRIMARY KEY,
  value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO change_counters (name, value) VALUES ('costs', 0);
CREATE TRIGGER costs_op_costs_insert AFTER INSERT ON op_costs
  BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'costs'; END;
CREATE TRIGGER costs_op_costs_update AFTER UPDATE ON op_costs
  BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'costs'; END;
CREATE TRIGGER costs_op_costs_delete AFTER DELETE ON op_costs
  BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'costs'; END;
CREATE TRIGGER costs_cost_tables_insert AFTER INSERT ON cost_tables
  BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'costs'; END;
CREATE TRIGGER costs_cost_tables_update AFTER UPDATE ON cost_tables
  BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'costs'; END;
CREATE TRIGGER costs_cost_tables_delete AFTER DELETE ON cost_tables
  BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'costs'; END;
CREATE TRIGGER costs_models_insert AFTER INSERT ON models
  BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'costs'; END;
CREATE TRIGGER costs_models_update AFTER UPDATE ON models
  BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'costs'; END;
CREATE TRIGGER costs_models_delete AFTER DELETE ON models
  BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'costs'; END;
CREATE TRIGGER costs_devices_insert AFTER INSERT ON devices
  BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'costs'; END;
CREATE TRIGGER costs_devices_update AFTER UPDATE ON devices
  BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'costs'; END;
CREATE TRIGGER costs_devices_delete AFTER DELETE ON devices
  BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'costs'; END;
CREATE TRIGGER costs_fingerprints_insert AFTER INSERT ON fingerprints
  BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'costs'; END;
CREATE TRIGGER costs_fingerprints_update AFTER UPDATE ON fingerprints
  BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'costs'; END;
CREATE TRIGGER costs_fingerprints_delete AFTER DELETE ON fingerprints
  BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'costs'; END;
CREATE TRIGGER costs_model_records_insert AFTER INSERT ON model_records
  BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'costs'; END;
-- Storing a record's summary changes no table: only its name, kind or bytes count.
CREATE TRIGGER costs_model_records_update AFTER UPDATE OF name, kind, content_hash, bytes ON model_records
  BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'costs'; END;
CREATE TRIGGER costs_model_records_delete AFTER DELETE ON model_records
  BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'costs'; END;
)sql",
    // 7 -> 8: cost tables keyed by the compute threads they were measured at, so that a 1-thread
    // profile no longer supersedes the 2-thread table of the same model. Old rows take the count
    // from their op keys ("/onednn/t<N>" ends a measured key, as profiler::OpKeyThreads reads it);
    // 0 (unknown) where no node has one. The newest table of a thread count that only lost to a
    // table of another count becomes current again: v8 would never have superseded it.
    R"sql(
ALTER TABLE cost_tables ADD COLUMN threads INTEGER NOT NULL DEFAULT 0 CHECK (threads >= 0);
UPDATE cost_tables SET threads = COALESCE(
  (SELECT CAST(substr(n.op_key, instr(n.op_key, '/onednn/t') + 9) AS INTEGER) FROM node_costs n
   WHERE n.cost_table_id = cost_tables.id AND instr(n.op_key, '/onednn/t') > 0 ORDER BY n.node LIMIT 1), 0);
DROP INDEX cost_tables_current;
CREATE UNIQUE INDEX cost_tables_current ON cost_tables(model_id, fingerprint_id, cost_source_id, threads)
  WHERE superseded_at IS NULL;
UPDATE cost_tables SET superseded_at = NULL WHERE id IN (
  SELECT MAX(o.id) FROM cost_tables o
  WHERE o.superseded_at IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM cost_tables c WHERE c.superseded_at IS NULL AND c.model_id = o.model_id
    AND c.fingerprint_id = o.fingerprint_id AND c.cost_source_id = o.cost_source_id AND c.threads = o.threads)
  GROUP BY o.model_id, o.fingerprint_id, o.cost_source_id, o.threads);
)sql",
    // 8 -> 9: a profile run names the model it profiled ('' for the runs before: not recorded).
    R"sql(
ALTER TABLE runs ADD COLUMN model TEXT NOT NULL DEFAULT '';
)sql",
};
static_assert(std::size(kMigrations) == kSchemaVersion, "one migration step per schema version");

// PostgreSQL runs the same steps, with SQLite's types spelt as PostgreSQL's (REAL is 4 bytes
// there; text compares bytewise as in SQLite) and the two steps SQLite's syntax cannot carry over
// (trigger bodies; instr) written again.
constexpr const char* kPostgresTriggers = R"sql(
ALTER TABLE model_records ADD COLUMN summary BYTEA;
CREATE TABLE change_counters (
  name TEXT COLLATE "C" PRIMARY KEY,
  value BIGINT NOT NULL
);
INSERT INTO change_counters (name, value) VALUES ('costs', 0);
CREATE FUNCTION edgecost_bump_costs() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN UPDATE change_counters SET value = value + 1 WHERE name = 'costs'; RETURN NULL; END $$;
CREATE TRIGGER costs_op_costs AFTER INSERT OR UPDATE OR DELETE ON op_costs
  FOR EACH ROW EXECUTE FUNCTION edgecost_bump_costs();
CREATE TRIGGER costs_cost_tables AFTER INSERT OR UPDATE OR DELETE ON cost_tables
  FOR EACH ROW EXECUTE FUNCTION edgecost_bump_costs();
CREATE TRIGGER costs_models AFTER INSERT OR UPDATE OR DELETE ON models
  FOR EACH ROW EXECUTE FUNCTION edgecost_bump_costs();
CREATE TRIGGER costs_devices AFTER INSERT OR UPDATE OR DELETE ON devices
  FOR EACH ROW EXECUTE FUNCTION edgecost_bump_costs();
CREATE TRIGGER costs_fingerprints AFTER INSERT OR UPDATE OR DELETE ON fingerprints
  FOR EACH ROW EXECUTE FUNCTION edgecost_bump_costs();
CREATE TRIGGER costs_model_records_insert AFTER INSERT OR DELETE ON model_records
  FOR EACH ROW EXECUTE FUNCTION edgecost_bump_costs();
-- Storing a record's summary changes no table: only its name, kind or bytes count.
CREATE TRIGGER costs_model_records_update AFTER UPDATE OF name, kind, content_hash, bytes ON model_records
  FOR EACH ROW EXECUTE FUNCTION edgecost_bump_costs();
)sql";

std::string ReplaceAll(std::string text, std::string_view from, std::string_view to) {
  for (size_t pos = text.find(from); pos != std::string::npos; pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
  return text;
}

std::string PostgresStep(size_t step) {
  if (step == 6) return kPostgresTriggers;
  std::string sql = kMigrations[step];
  sql = ReplaceAll(sql, "INTEGER PRIMARY KEY", "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY");
  sql = ReplaceAll(sql, " INTEGER", " BIGINT");
  sql = ReplaceAll(sql, " REAL", " DOUBLE PRECISION");
  sql = ReplaceAll(sql, " BLOB", " BYTEA");
  sql = ReplaceAll(sql, " TEXT", " TEXT COLLATE \"C\"");
  sql = ReplaceAll(sql, ") WITHOUT ROWID;", ");");
  sql = ReplaceAll(sql, "instr(", "strpos(");  // substr() is the same in both
  return sql;
}

std::string MigrationStep(Backend backend, size_t step) {
  return backend == Backend::kPostgres ? PostgresStep(step) : kMigrations[step];
}

}  // namespace

Status CostDb::Migrate() {
  EC_ASSIGN_OR_RETURN(int64_t version, db_.connection().SchemaVersion());
  if (version == kSchemaVersion) return Status::Ok();
  // WAL is a property of the file: readers go on while a profile writes.
  if (db_.backend() == Backend::kSqlite) EC_RETURN_IF_ERROR(db_.Exec("PRAGMA journal_mode = WAL"));
  for (;;) {
    EC_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(db_, Kind::kWrite));
    // Re-read under the write lock: another process may have migrated meanwhile.
    EC_ASSIGN_OR_RETURN(version, db_.connection().SchemaVersion());
    if (version >= kSchemaVersion) return Status::Ok();
    const std::string step =
        "migrating " + path() + " from schema " + std::to_string(version) + " to " + std::to_string(version + 1);
    EC_RETURN_IF_ERROR(db_.Exec(MigrationStep(db_.backend(), static_cast<size_t>(version))).WithContext(step));
    EC_RETURN_IF_ERROR(db_.connection().SetSchemaVersion(version + 1));
    EC_RETURN_IF_ERROR(tx.Commit());
  }
}

}  // namespace edgecost::costdb
