#include "service/cost_export.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <zlib.h>

#include <algorithm>
#include <climits>
#include <map>
#include <set>

#include "base/hash.h"
#include "base/time_text.h"
#include "profiler/node_work.h"
#include "proto/json.h"

namespace edgecost::service {
namespace {

costdb::RunStatus RunStatusOf(const std::string& text) {
  if (text == "complete") return costdb::RunStatus::kComplete;
  if (text == "failed") return costdb::RunStatus::kFailed;
  if (text == "cancelled") return costdb::RunStatus::kCancelled;
  return costdb::RunStatus::kRunning;
}

// Deterministic: a message's maps (op attributes) in one order, so that equal records compare equal.
std::string Bytes(const google::protobuf::MessageLite& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return bytes;
}

v1::CostTableRef RefOf(const costdb::CostTableKey& key) {
  v1::CostTableRef ref;
  ref.set_model(key.model);
  ref.set_cost_source(key.cost_source);
  ref.set_batch_size(key.batch_size);
  ref.set_derivation(key.derivation);
  ref.set_trainable(key.trainable);
  ref.set_threads(key.threads);
  return ref;
}

costdb::CostTableKey KeyOf(const v1::CostTableRef& ref, const std::string& device) {
  return {.model = ref.model(),
          .device = device,
          .cost_source = ref.cost_source(),
          .batch_size = ref.batch_size(),
          .derivation = ref.derivation(),
          .trainable = ref.trainable(),
          .threads = ref.threads()};
}


}  // namespace

Result<v1::CostExport> ExportDevice(costdb::CostDb& db, const std::string& device, const ExportOptions& options,
                                    ExportMarks* marks) {
  v1::CostExport exported;
  EC_ASSIGN_OR_RETURN(*exported.mutable_device(), db.GetDevice(device));
  exported.mutable_device()->clear_history();
  if (exported.device().kind() != v1::Device::KIND_MEASURED) {
    return InvalidArgument("'" + device +
                           "' is a board preset: its costs are computed, not measured; nothing to export");
  }
  const std::string& hash = exported.device().fingerprint().hash();
  ExportMarks covered{.run_id = options.after_run_id,
                      .cost_table_id = options.after_cost_table_id,
                      .schedule_id = options.after_schedule_id,
                      .train_run_id = options.after_train_run_id};

  // Earlier fingerprints, oldest first, so that the receiving side ends on the current one.
  EC_ASSIGN_OR_RETURN(std::vector<costdb::FingerprintRecord> history, db.ListFingerprintHistory(device));
  std::set<std::string> earlier;
  for (auto it = history.rbegin(); it != history.rend(); ++it) {
    if (it->fingerprint.hash() == hash) continue;
    earlier.insert(it->fingerprint.hash());
    *exported.add_earlier_fingerprints() = it->fingerprint;
  }

  // The op costs of a run still running go with the run once it finished, not now without it.
  EC_ASSIGN_OR_RETURN(std::vector<costdb::StoredRun> runs, db.ListRuns());
  std::set<std::string> unfinished;
  for (const costdb::StoredRun& run : runs) {
    if (run.status != costdb::RunStatus::kRunning || run.fingerprint_hash != hash) continue;
    EC_ASSIGN_OR_RETURN(std::vector<v1::OpCost> measuring, db.ListRunOpCosts(run.id));
    for (const v1::OpCost& op : measuring) unfinished.insert(op.signature().key());
  }
  EC_ASSIGN_OR_RETURN(std::vector<v1::OpCost> ops, db.ListOpCosts(hash));
  for (v1::OpCost& op : ops) {
    if (!unfinished.contains(op.signature().key())) *exported.add_op_costs() = std::move(op);
  }
  EC_ASSIGN_OR_RETURN(std::optional<v1::PagingCost> paging, db.GetPagingCost(hash));
  if (paging) *exported.mutable_paging() = *paging;
  EC_ASSIGN_OR_RETURN(std::vector<costdb::StoredCostTable> tables, db.ListCostTables(device));
  std::map<int64_t, costdb::CostTableKey> current_tables;  // by id: what a schedule may refer to
  for (const costdb::StoredCostTable& stored : tables) {
    current_tables[stored.id] = stored.key;
    if (stored.id <= options.after_cost_table_id) continue;
    EC_ASSIGN_OR_RETURN(*exported.add_cost_tables(), db.GetCostTableById(stored.id));
    covered.cost_table_id = std::max(covered.cost_table_id, stored.id);
  }
  EC_ASSIGN_OR_RETURN(std::vector<v1::EnergyCalibration> calibrations, db.ListCalibrations(hash));
  for (v1::EnergyCalibration& c : calibrations) *exported.add_calibrations() = std::move(c);

  // Finished runs on this device's fingerprints, up to the first one still running.
  bool running_seen = false;
  for (const costdb::StoredRun& run : runs) {
    if (run.id <= options.after_run_id) continue;
    if (run.fingerprint_hash != hash && !earlier.contains(run.fingerprint_hash)) continue;
    if (run.status == costdb::RunStatus::kRunning) {
      running_seen = true;
      continue;
    }
    if (!running_seen) covered.run_id = run.id;
    v1::ExportedRun& out = *exported.add_runs();
    out.set_cost_source(run.cost_source);
    out.set_status(costdb::RunStatusText(run.status));
    out.set_started_at(run.started_at);
    out.set_finished_at(run.finished_at);
    out.set_has_idle_power(run.idle_power_w.has_value());
    out.set_idle_power_w(run.idle_power_w.value_or(0));
    out.set_model(run.model);
    out.set_fingerprint_hash(run.fingerprint_hash);
    EC_ASSIGN_OR_RETURN(std::vector<v1::OpCost> measured, db.ListRunOpCosts(run.id));
    for (v1::OpCost& op : measured) {
      out.add_op_keys(op.signature().key());
      if (run.fingerprint_hash != hash) {  // the current fingerprint's are in op_costs already
        v1::ExportedOpCost& earlier_op = *exported.add_earlier_op_costs();
        earlier_op.set_fingerprint_hash(run.fingerprint_hash);
        *earlier_op.mutable_cost() = std::move(op);
      }
    }
  }
  // A run still running keeps the mark below it: its op costs go with it once it finished.
  if (running_seen) {
    for (const costdb::StoredRun& run : runs) {
      if (run.id > options.after_run_id && run.status == costdb::RunStatus::kRunning &&
          (run.fingerprint_hash == hash || earlier.contains(run.fingerprint_hash))) {
        covered.run_id = std::max(options.after_run_id, run.id - 1);
        break;
      }
    }
  }

  EC_ASSIGN_OR_RETURN(std::vector<costdb::StoredSchedule> schedules, db.ListSchedules("", device));
  for (const costdb::StoredSchedule& stored : schedules) {
    if (stored.id <= options.after_schedule_id) continue;
    v1::ExportedSchedule& out = *exported.add_schedules();
    out.set_local_id(static_cast<uint64_t>(stored.id));
    *out.mutable_request() = stored.request;
    EC_ASSIGN_OR_RETURN(*out.mutable_schedule(), db.GetSchedule(stored.id));
    // A table no longer current is not in the export: the schedule goes without one.
    if (auto it = current_tables.find(stored.cost_table_id); it != current_tables.end()) {
      *out.mutable_cost_table() = RefOf(it->second);
    }
    covered.schedule_id = std::max(covered.schedule_id, stored.id);
  }

  EC_ASSIGN_OR_RETURN(std::vector<v1::TrainRun> train_runs, db.ListTrainRuns("", INT_MAX, /*steps=*/true));
  for (v1::TrainRun& run : train_runs) {
    const auto id = static_cast<int64_t>(run.id());
    if (id <= options.after_train_run_id || run.device() != device) continue;
    covered.train_run_id = std::max(covered.train_run_id, id);
    *exported.add_train_runs() = std::move(run);
  }

  // The model records the records name; a zoo model has none: every build knows it.
  std::set<std::string> names;
  for (const v1::CostTable& t : exported.cost_tables()) names.insert(t.graph().model());
  for (const v1::ExportedRun& r : exported.runs()) names.insert(r.model());
  for (const v1::ExportedSchedule& s : exported.schedules()) names.insert(s.request().model());
  for (const v1::TrainRun& r : exported.train_runs()) names.insert(r.model());
  names.erase("");
  for (const std::string& name : names) {
    EC_ASSIGN_OR_RETURN(std::optional<costdb::ModelRecord> record, db.GetModelRecord(name));
    if (!record) continue;
    v1::ExportedModel& model = *exported.add_models();
    model.set_name(record->name);
    model.set_kind(record->kind);
    model.set_content_hash(record->content_hash);
    model.set_bytes(std::move(record->bytes));
  }
  exported.set_exported_at(NowRfc3339());
  if (marks) *marks = covered;
  return exported;
}

namespace {

// What the writes cannot see: whose the export is. Its numbers are checked by
// the cost database's writes, inside the import's one transaction.
Status CheckExport(const v1::CostExport& exported) {
  const v1::Device& device = exported.device();
  if (device.kind() != v1::Device::KIND_MEASURED) return InvalidArgument("the export holds no measured device");
  if (device.name().empty() || device.fingerprint().hash().empty()) {
    return InvalidArgument("the export's device has no name or no fingerprint");
  }
  const std::string& hash = device.fingerprint().hash();
  for (const v1::CostTable& table : exported.cost_tables()) {
    if (table.device() != device.name() || table.fingerprint_hash() != hash) {
      return InvalidArgument("the export's cost table for " + table.graph().model() + " belongs to " + table.device() +
                             " (" + table.fingerprint_hash() + "), not to the exported device " + device.name() + " (" +
                             hash + ")");
    }
  }
  std::set<std::string> fingerprints = {hash};
  for (const v1::Fingerprint& f : exported.earlier_fingerprints()) {
    if (f.hash().empty()) return InvalidArgument("an earlier fingerprint of the export has no hash");
    fingerprints.insert(f.hash());
  }
  for (const v1::ExportedRun& run : exported.runs()) {
    if (!run.fingerprint_hash().empty() && !fingerprints.contains(run.fingerprint_hash())) {
      return InvalidArgument("the export's run started " + run.started_at() + " measured fingerprint " +
                             run.fingerprint_hash() + ", not one of device " + device.name());
    }
    if (RunStatusOf(run.status()) == costdb::RunStatus::kRunning) {
      return InvalidArgument("the export's run started " + run.started_at() + " has no finished status ('" +
                             run.status() + "')");
    }
  }
  for (const v1::ExportedOpCost& op : exported.earlier_op_costs()) {
    if (!fingerprints.contains(op.fingerprint_hash())) {
      return InvalidArgument("the export's op cost " + op.cost().signature().key() + " belongs to fingerprint " +
                             op.fingerprint_hash() + ", not one of device " + device.name());
    }
  }
  // One op listed twice: the same figures count once, contradicting ones leave nothing to believe.
  std::map<std::pair<std::string, std::string>, std::string> ops;  // (fingerprint, key) -> bytes
  const auto listed = [&](const std::string& fingerprint, const v1::OpCost& op) -> Status {
    const auto [it, first] = ops.emplace(std::pair{fingerprint, op.signature().key()}, Bytes(op));
    if (!first && it->second != Bytes(op)) {
      return InvalidArgument("the export lists op " + op.signature().key() + " of fingerprint " + fingerprint +
                             " twice with different figures: nothing imported");
    }
    return Status::Ok();
  };
  for (const v1::OpCost& op : exported.op_costs()) EC_RETURN_IF_ERROR(listed(hash, op));
  for (const v1::ExportedOpCost& op : exported.earlier_op_costs()) {
    EC_RETURN_IF_ERROR(listed(op.fingerprint_hash(), op.cost()));
  }
  for (const v1::ExportedModel& model : exported.models()) {
    if (Fnv1aHex(model.bytes()) != model.content_hash()) {
      return InvalidArgument("the export's model '" + model.name() + "' does not hash to its content hash " +
                             model.content_hash() + ": the file is damaged");
    }
  }
  for (const v1::TrainRun& run : exported.train_runs()) {
    if (run.device() != device.name()) {
      return InvalidArgument("the export's training run of " + run.model() + " ran on " + run.device() + ", not on " +
                             device.name());
    }
  }
  return Status::Ok();
}

// Stores an op cost unless this database holds the same one; the run it came from, when known.
Status ImportOpCost(costdb::CostDb& db, const std::string& hash, int64_t run_id, const v1::OpCost& op,
                    ImportSummary& summary) {
  EC_ASSIGN_OR_RETURN(std::optional<v1::OpCost> stored, db.GetOpCost(hash, op.signature().key()));
  if (stored && Bytes(*stored) == Bytes(op)) {
    ++summary.unchanged;
    return Status::Ok();
  }
  EC_RETURN_IF_ERROR(db.PutOpCost(hash, run_id, op));
  ++summary.op_costs;
  return Status::Ok();
}

}  // namespace

namespace {

// An export of this host (by name or fingerprint) would overwrite what it measured: only with --replace.
Status CheckNotThisHost(const v1::CostExport& exported, const ImportOptions& options) {
  const v1::Device& device = exported.device();
  const std::string& hash = device.fingerprint().hash();
  const bool same_name = device.name() == options.host.name();
  if (!same_name && hash != options.host.fingerprint().hash()) return Status::Ok();
  return FailedPrecondition("the export's device " + device.name() + " (fingerprint " + hash + ") " +
                            (same_name ? "has the name of this host" : "has this host's fingerprint") +
                            ": importing it would " +
                            (same_name && hash != options.host.fingerprint().hash()
                                 ? "mark this host's hardware as changed"
                                 : "overwrite what this host measured") +
                            "; pass --replace if that is meant");
}

// Models first: the cost tables' graphs are read under their names.
Status ImportModels(costdb::CostDb& db, const v1::CostExport& exported, ImportSummary& summary) {
  EC_ASSIGN_OR_RETURN(std::vector<costdb::ModelRecord> records, db.ListModelRecords());
  std::map<std::string, std::string> stored_models;  // name -> content hash
  for (const costdb::ModelRecord& r : records) stored_models[r.name] = r.content_hash;
  for (const v1::ExportedModel& model : exported.models()) {
    auto it = stored_models.find(model.name());
    if (it != stored_models.end() && it->second == model.content_hash()) {
      ++summary.unchanged;
      continue;
    }
    if (it != stored_models.end()) {
      return FailedPrecondition(db.path() + " holds another model named '" + model.name() + "' (content " +
                                it->second + ", the export's is " + model.content_hash() +
                                "): the export's costs were measured on its own; remove or rename the one here "
                                "(`edgecost models remove " +
                                model.name() + "`) and import again");
    }
    costdb::ModelRecord record{.name = model.name(),
                               .kind = model.kind(),
                               .content_hash = model.content_hash(),
                               .size_bytes = static_cast<int64_t>(model.bytes().size()),
                               .bytes = model.bytes()};
    EC_RETURN_IF_ERROR(db.PutModelRecord(record));
    ++summary.models;
  }
  return Status::Ok();
}

Status ImportFingerprints(costdb::CostDb& db, const v1::CostExport& exported, ImportSummary& summary) {
  const v1::Device& device = exported.device();
  // Earlier fingerprints this database has not seen, oldest first; then the current one.
  std::set<std::string> known;
  if (Result<v1::Device> stored = db.GetDevice(device.name()); stored.ok()) {
    known.insert(stored->fingerprint().hash());
    for (const v1::Fingerprint& f : stored->history()) known.insert(f.hash());
  } else if (stored.status().code() != ErrorCode::kNotFound) {
    return stored.status();
  }
  for (const v1::Fingerprint& f : exported.earlier_fingerprints()) {
    if (known.contains(f.hash())) continue;
    v1::Device then = device;
    *then.mutable_fingerprint() = f;
    EC_RETURN_IF_ERROR(db.UpsertDevice(then).status());
    ++summary.fingerprints;
  }
  EC_RETURN_IF_ERROR(db.UpsertDevice(device).status());
  return Status::Ok();
}

Status ImportRunsAndOpCosts(costdb::CostDb& db, const v1::CostExport& exported, ImportSummary& summary) {
  const std::string& hash = exported.device().fingerprint().hash();
  // Runs, identified by fingerprint, source, model and start; then the op costs they measured.
  std::map<std::pair<std::string, std::string>, int64_t> run_of;  // (fingerprint, op key) -> run id here
  std::set<int64_t> new_runs;                                     // stored by this import
  for (const v1::ExportedRun& run : exported.runs()) {
    const std::string& run_hash = run.fingerprint_hash().empty() ? hash : run.fingerprint_hash();
    costdb::StoredRun stored{.fingerprint_hash = run_hash,
                             .cost_source = run.cost_source(),
                             .status = RunStatusOf(run.status()),
                             .started_at = run.started_at(),
                             .finished_at = run.finished_at(),
                             .idle_power_w = run.has_idle_power() ? std::optional<double>(run.idle_power_w())
                                                                  : std::nullopt,
                             .model = run.model()};
    EC_ASSIGN_OR_RETURN(costdb::CostDb::Copied copied, db.CopyRun(stored));
    if (copied.added) new_runs.insert(copied.id);
    copied.added ? ++summary.runs : ++summary.unchanged;
    for (const std::string& key : run.op_keys()) run_of[{run_hash, key}] = copied.id;
  }
  // An op cost of a run this database had already, which that run no longer provides here, was
  // measured again since: the export's older figure does not replace it.
  std::map<int64_t, std::set<std::string>> provided;  // by runs stored before this import
  auto import_op = [&](const std::string& fingerprint, const v1::OpCost& op) -> Status {
    const std::string& key = op.signature().key();
    auto it = run_of.find({fingerprint, key});
    const int64_t run = it == run_of.end() ? 0 : it->second;
    if (run != 0 && !new_runs.contains(run)) {
      if (!provided.contains(run)) {
        EC_ASSIGN_OR_RETURN(std::vector<v1::OpCost> still, db.ListRunOpCosts(run));
        for (const v1::OpCost& c : still) provided[run].insert(c.signature().key());
      }
      if (!provided[run].contains(key)) {
        ++summary.unchanged;
        return Status::Ok();
      }
    }
    return ImportOpCost(db, fingerprint, run, op, summary);
  };
  for (const v1::ExportedOpCost& op : exported.earlier_op_costs()) {
    EC_RETURN_IF_ERROR(import_op(op.fingerprint_hash(), op.cost()));
  }
  for (const v1::OpCost& op : exported.op_costs()) EC_RETURN_IF_ERROR(import_op(hash, op));
  return Status::Ok();
}

Status ImportCalibrationsAndPaging(costdb::CostDb& db, const v1::CostExport& exported, ImportSummary& summary) {
  const std::string& hash = exported.device().fingerprint().hash();
  // A device of the same fingerprint elsewhere estimates energy with the same model.
  EC_ASSIGN_OR_RETURN(std::vector<v1::EnergyCalibration> known_calibrations, db.ListCalibrations(hash));
  for (v1::EnergyCalibration c : exported.calibrations()) {
    c.set_fingerprint_hash(hash);
    const bool stored = std::any_of(known_calibrations.begin(), known_calibrations.end(), [&](const auto& k) {
      return k.calibrated_at() == c.calibrated_at() && k.probe() == c.probe();
    });
    if (stored) {
      ++summary.unchanged;
      continue;
    }
    EC_RETURN_IF_ERROR(db.PutCalibration(c).status());
    ++summary.calibrations;
  }
  if (exported.has_paging()) {
    EC_ASSIGN_OR_RETURN(std::optional<v1::PagingCost> stored, db.GetPagingCost(hash));
    if (stored && Bytes(*stored) == Bytes(exported.paging())) {
      ++summary.unchanged;
    } else {
      EC_RETURN_IF_ERROR(db.PutPagingCost(hash, exported.paging()));
      summary.paging = true;
    }
  }
  return Status::Ok();
}

Status ImportCostTables(costdb::CostDb& db, const v1::CostExport& exported, ImportSummary& summary) {
  // A cost table equal to one stored for its key is that table, current or superseded since (by a
  // newer profile, or a solve here that stored the table it solved with); another supersedes them.
  for (v1::CostTable table : exported.cost_tables()) {
    // An export from before tables carried their thread count: its op keys still say it.
    if (table.threads() == 0) table.set_threads(static_cast<uint32_t>(profiler::CostTableOpKeyThreads(table)));
    EC_ASSIGN_OR_RETURN(std::vector<int64_t> versions, db.ListCostTableVersions(table));
    const std::string bytes = Bytes(table);
    bool stored = false;
    for (int64_t id : versions) {
      EC_ASSIGN_OR_RETURN(v1::CostTable version, db.GetCostTableById(id));
      if (Bytes(version) == bytes) {
        stored = true;
        break;
      }
    }
    if (stored) {
      ++summary.unchanged;
      continue;
    }
    EC_RETURN_IF_ERROR(db.PutCostTable(table).status());
    ++summary.cost_tables;
  }
  return Status::Ok();
}

// Returns the exporting database's schedule ids with this database's for them.
Result<std::map<uint64_t, int64_t>> ImportSchedules(costdb::CostDb& db, const v1::CostExport& exported,
                                                     ImportSummary& summary) {
  const v1::Device& device = exported.device();
  // Schedules: the request is stored once; a schedule equal to one stored for it is that one.
  std::map<uint64_t, int64_t> schedule_here;  // exporting database's id -> this database's
  for (const v1::ExportedSchedule& s : exported.schedules()) {
    EC_ASSIGN_OR_RETURN(int64_t request_id, db.PutScheduleRequest(s.request()));
    const std::string& model = s.request().model().empty() ? s.request().graph_file() : s.request().model();
    EC_ASSIGN_OR_RETURN(std::vector<costdb::StoredSchedule> stored, db.ListSchedules(model, s.request().device()));
    const std::string bytes = Bytes(s.schedule());
    int64_t found = 0;
    for (const costdb::StoredSchedule& candidate : stored) {
      if (candidate.request_id != request_id) continue;
      EC_ASSIGN_OR_RETURN(v1::Schedule schedule, db.GetSchedule(candidate.id));
      if (Bytes(schedule) == bytes) {
        found = candidate.id;
        break;
      }
    }
    if (found != 0) {
      ++summary.unchanged;
      schedule_here[s.local_id()] = found;
      continue;
    }
    int64_t table_id = 0;  // this database's current table of the key the schedule was solved from
    if (s.has_cost_table()) {
      EC_ASSIGN_OR_RETURN(std::vector<costdb::StoredCostTable> listed, db.ListCostTables(device.name()));
      const costdb::CostTableKey key = KeyOf(s.cost_table(), device.name());
      for (const costdb::StoredCostTable& t : listed) {
        if (t.key.model == key.model && t.key.cost_source == key.cost_source && t.key.batch_size == key.batch_size &&
            t.key.derivation == key.derivation && t.key.trainable == key.trainable && t.key.threads == key.threads) {
          table_id = t.id;
        }
      }
    }
    EC_ASSIGN_OR_RETURN(schedule_here[s.local_id()], db.PutSchedule(request_id, table_id, s.schedule()));
    ++summary.schedules;
  }
  return schedule_here;
}

Status ImportTrainRuns(costdb::CostDb& db, const v1::CostExport& exported,
                       const std::map<uint64_t, int64_t>& schedule_here, ImportSummary& summary) {
  for (v1::TrainRun run : exported.train_runs()) {
    auto it = schedule_here.find(run.schedule_id());
    run.set_schedule_id(it == schedule_here.end() ? 0 : static_cast<uint64_t>(it->second));
    EC_ASSIGN_OR_RETURN(costdb::CostDb::Copied copied, db.CopyTrainRun(run));
    copied.added ? ++summary.train_runs : ++summary.unchanged;
  }
  return Status::Ok();
}

}  // namespace

Result<ImportSummary> ImportDevice(costdb::CostDb& db, const v1::CostExport& exported, const ImportOptions& options) {
  EC_RETURN_IF_ERROR(CheckExport(exported));
  if (!options.replace) EC_RETURN_IF_ERROR(CheckNotThisHost(exported, options));
  ImportSummary summary{.device = exported.device().name()};
  EC_ASSIGN_OR_RETURN(costdb::Transaction tx, db.BeginWrite());
  EC_RETURN_IF_ERROR(ImportModels(db, exported, summary));
  EC_RETURN_IF_ERROR(ImportFingerprints(db, exported, summary));
  EC_RETURN_IF_ERROR(ImportRunsAndOpCosts(db, exported, summary));
  EC_RETURN_IF_ERROR(ImportCalibrationsAndPaging(db, exported, summary));
  EC_RETURN_IF_ERROR(ImportCostTables(db, exported, summary));
  EC_ASSIGN_OR_RETURN(const auto schedule_here, ImportSchedules(db, exported, summary));
  EC_RETURN_IF_ERROR(ImportTrainRuns(db, exported, schedule_here, summary));
  EC_RETURN_IF_ERROR(tx.Commit());
  return summary;
}

namespace {

constexpr unsigned char kGzipMagic[] = {0x1f, 0x8b};

Result<std::string> Gzip(const std::string& bytes) {
  z_stream z{};
  // 15 + 16: a gzip header, so that zcat reads the file.
  if (deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) != Z_OK) {
    return Internal("zlib: cannot start compressing");
  }
  std::string out(deflateBound(&z, bytes.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) return Internal("zlib: compressing the export failed (" + std::to_string(rc) + ")");
  return out;
}

Result<std::string> Gunzip(const std::string& bytes, const std::string& what) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) return Internal("zlib: cannot start inflating");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  std::string out;
  char buffer[1 << 16];
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buffer);
    z.avail_out = sizeof buffer;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buffer, sizeof buffer - z.avail_out);
    if (rc == Z_BUF_ERROR && z.avail_in == 0) break;  // the input ended before the stream did
  }
  inflateEnd(&z);
  if (rc != Z_STREAM_END) return InvalidArgument(what + " is a damaged or truncated gzip stream");
  return out;
}

}  // namespace

Result<std::string> EncodeExport(const v1::CostExport& exported, ExportFormat format) {
  if (format == ExportFormat::kJson) {
    EC_ASSIGN_OR_RETURN(std::string json, proto::ToJson(exported, {.indent = true}));
    return json + "\n";
  }
  std::string bytes;
  if (!exported.SerializeToString(&bytes)) return Internal("the export does not encode (over 2 GiB?)");
  if (format == ExportFormat::kProtobuf) return bytes;
  return Gzip(bytes);
}

Result<v1::CostExport> DecodeExport(const std::string& bytes, const std::string& what) {
  v1::CostExport exported;
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == kGzipMagic[0] &&
      static_cast<unsigned char>(bytes[1]) == kGzipMagic[1]) {
    EC_ASSIGN_OR_RETURN(std::string plain, Gunzip(bytes, what));
    if (!exported.ParseFromString(plain)) return InvalidArgument(what + " is not a compressed edgecost.v1.CostExport");
    return exported;
  }
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && bytes[first] == '{') {
    if (Status s = proto::FromJson(bytes, &exported); !s.ok()) {
      return InvalidArgument(what + " is not an edgecost.v1.CostExport in JSON: " + s.message());
    }
    return exported;
  }
  if (bytes.empty() || !exported.ParseFromString(bytes)) {
    return InvalidArgument(what + " is not an edgecost.v1.CostExport (gzip-compressed protobuf, protobuf or JSON)");
  }
  return exported;
}

}  // namespace edgecost::service
