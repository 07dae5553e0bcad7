#include "service/sync.h"

#include <filesystem>

#include "base/hash.h"
#include "costdb/postgres.h"

namespace edgecost::service {
namespace {

bool IsUrl(const std::string& central) { return central.find("://") != std::string::npos; }

// Records measured on one board, named as another board of the same hardware.
void RenameDevice(v1::CostExport& bundle, const std::string& name) {
  bundle.mutable_device()->set_name(name);
  for (v1::CostTable& table : *bundle.mutable_cost_tables()) table.set_device(name);
  for (v1::ExportedSchedule& s : *bundle.mutable_schedules()) {
    s.mutable_request()->set_device(name);
    if (s.schedule().has_request()) s.mutable_schedule()->mutable_request()->set_device(name);
  }
  for (v1::TrainRun& run : *bundle.mutable_train_runs()) run.set_device(name);
}

// The marks of one device towards one central store.
struct Marks {
  std::string prefix;
  ExportOptions after;
  int64_t costs_version = -1;
  int64_t calibrations = -1;
};

Result<Marks> ReadMarks(costdb::CostDb& local, const std::string& central, const std::string& device) {
  Marks marks{.prefix = Fnv1aHex(central) + ":" + device + ":"};
  EC_ASSIGN_OR_RETURN(marks.after.after_run_id, local.GetSyncMark(marks.prefix + "runs"));
  EC_ASSIGN_OR_RETURN(marks.after.after_cost_table_id, local.GetSyncMark(marks.prefix + "cost_tables"));
  EC_ASSIGN_OR_RETURN(marks.after.after_schedule_id, local.GetSyncMark(marks.prefix + "schedules"));
  EC_ASSIGN_OR_RETURN(marks.after.after_train_run_id, local.GetSyncMark(marks.prefix + "train_runs"));
  // Stored plus one, so that a mark never set (0) differs from every real value.
  EC_ASSIGN_OR_RETURN(int64_t version, local.GetSyncMark(marks.prefix + "costs_version"));
  EC_ASSIGN_OR_RETURN(int64_t calibrations, local.GetSyncMark(marks.prefix + "calibrations"));
  marks.costs_version = version - 1;
  marks.calibrations = calibrations - 1;
  return marks;
}

Status WriteMarks(costdb::CostDb& local, const Marks& marks, const ExportMarks& covered, int64_t costs_version,
                  int64_t calibrations) {
  EC_ASSIGN_OR_RETURN(costdb::Transaction tx, local.BeginWrite());
  EC_RETURN_IF_ERROR(local.SetSyncMark(marks.prefix + "runs", covered.run_id));
  EC_RETURN_IF_ERROR(local.SetSyncMark(marks.prefix + "cost_tables", covered.cost_table_id));
  EC_RETURN_IF_ERROR(local.SetSyncMark(marks.prefix + "schedules", covered.schedule_id));
  EC_RETURN_IF_ERROR(local.SetSyncMark(marks.prefix + "train_runs", covered.train_run_id));
  EC_RETURN_IF_ERROR(local.SetSyncMark(marks.prefix + "costs_version", costs_version + 1));
  EC_RETURN_IF_ERROR(local.SetSyncMark(marks.prefix + "calibrations", calibrations + 1));
  return tx.Commit();
}

}  // namespace

std::string DescribeImport(const ImportSummary& s) {
  std::string line;
  auto add = [&](int n, const std::string& what) {  // `what` in the singular; each takes an s
    if (n > 0) line += (line.empty() ? "" : ", ") + std::to_string(n) + " " + what + (n == 1 ? "" : "s");
  };
  add(s.fingerprints, "earlier fingerprint");
  add(s.op_costs, "op cost");
  add(s.runs, "run");
  add(s.cost_tables, "cost table");
  add(s.calibrations, "energy calibration");
  if (s.paging) line += std::string(line.empty() ? "" : ", ") + "paging costs";
  add(s.schedules, "schedule");
  add(s.train_runs, "training run");
  add(s.models, "model");
  if (line.empty()) line = "nothing new";
  if (s.unchanged > 0) line += " (" + std::to_string(s.unchanged) + " already there)";
  return line;
}

Result<costdb::CostDb> OpenCentralStore(const std::string& central, const SyncOptions& options) {
  if (central.empty()) return InvalidArgument("no central store given");
  if (!IsUrl(central) && !options.create) {
    std::error_code error;
    if (!std::filesystem::exists(central, error)) {
      return Unavailable("the central store " + costdb::RedactUrl(central) +
                         " does not exist (an unmounted share, or a path to create with `edgecost db push " +
                         costdb::RedactUrl(central) +
                         " --create`)");
    }
  }
  Result<costdb::CostDb> db = costdb::CostDb::Open(
      central, costdb::OpenOptions{.mode = costdb::OpenMode::kReadWrite, .busy_timeout_ms = options.busy_timeout_ms});
  if (!db.ok()) {
    return Unavailable("the central store " + costdb::RedactUrl(central) + " is unreachable: " + db.status().message());
  }
  return db;
}

namespace {

// The store's device of the bundle's name is the bundle's, or none: its fingerprint is the bundle's
// or one of its earlier ones.
Status CheckSameHost(costdb::CostDb& store, const v1::CostExport& bundle, const std::string& central) {
  const v1::Device& device = bundle.device();
  Result<v1::Device> stored = store.GetDevice(device.name());
  if (stored.status().code() == ErrorCode::kNotFound) return Status::Ok();
  EC_RETURN_IF_ERROR(stored.status());
  const std::string& theirs = stored->fingerprint().hash();
  if (theirs == device.fingerprint().hash()) return Status::Ok();
  for (const v1::Fingerprint& earlier : bundle.earlier_fingerprints()) {
    if (earlier.hash() == theirs) return Status::Ok();  // this host before its hardware changed
  }
  return FailedPrecondition("the central store " + costdb::RedactUrl(central) + " has a device named " +
                            device.name() + " with other hardware (fingerprint " + theirs + ", here " +
                            device.fingerprint().hash() +
                            "): another host of the same name; give one of them another host name, so that "
                            "neither's costs predict for the other");
}

}  // namespace

Result<PushSummary> PushToStore(costdb::CostDb& local, const std::string& central, const SyncOptions& options) {
  if (central == local.path()) return InvalidArgument("the central store is this database itself: " + costdb::RedactUrl(central));
  EC_ASSIGN_OR_RETURN(std::vector<v1::Device> devices, local.ListDevices());
  std::optional<costdb::CostDb> store;  // opened at the first device with something to send
  PushSummary summary;
  for (const v1::Device& device : devices) {
    if (device.kind() != v1::Device::KIND_MEASURED) continue;  // a preset's costs are computed anywhere
    // Read before the export: a write meanwhile is sent next time.
    EC_ASSIGN_OR_RETURN(int64_t costs_version, local.CostsVersion());
    EC_ASSIGN_OR_RETURN(std::vector<v1::EnergyCalibration> calibrations,
                        local.ListCalibrations(device.fingerprint().hash()));
    EC_ASSIGN_OR_RETURN(Marks marks, ReadMarks(local, central, device.name()));
    ExportMarks covered;
    EC_ASSIGN_OR_RETURN(v1::CostExport bundle, ExportDevice(local, device.name(), marks.after, &covered));
    const auto calibration_count = static_cast<int64_t>(calibrations.size());
    const bool nothing_new = bundle.runs_size() == 0 && bundle.cost_tables_size() == 0 &&
                             bundle.schedules_size() == 0 && bundle.train_runs_size() == 0 &&
                             costs_version == marks.costs_version && calibration_count == marks.calibrations;
    if (nothing_new) {
      ++summary.up_to_date;
      continue;
    }
    if (!store) {
      EC_ASSIGN_OR_RETURN(costdb::CostDb opened, OpenCentralStore(central, options));
      store.emplace(std::move(opened));
    }
    // A board of hardware the store already knows under another name joins that device's
    // records: costs are per fingerprint, so one board profiled serves all of its kind.
    EC_ASSIGN_OR_RETURN(std::optional<std::string> owner,
                        store->DeviceWithFingerprint(device.fingerprint().hash()));
    if (owner && *owner != device.name()) {
      RenameDevice(bundle, *owner);
      if (options.progress) {
        options.progress(device.name() + " has the hardware of " + *owner + " (fingerprint " +
                         device.fingerprint().hash() + "): its records join " + *owner + "'s");
      }
    }
    // Another host of the same name must not become this one's current hardware (import's guard):
    // the store's device of this name is this one's, now or before a hardware change here.
    if (!owner || *owner == device.name()) {
      EC_RETURN_IF_ERROR(CheckSameHost(*store, bundle, central));
    }
    // The central store is not this host: whatever device the export names is stored as it is.
    Result<ImportSummary> sent = ImportDevice(*store, bundle, ImportOptions{.replace = true});
    if (!sent.ok()) {
      const Status& s = sent.status();
      const std::string message = "pushing " + device.name() + " to " + costdb::RedactUrl(central) + ": " + s.message();
      // A store that went away or is held by another writer is retried; a conflict needs a person.
      return s.code() == ErrorCode::kInvalidArgument || s.code() == ErrorCode::kFailedPrecondition
                 ? Status(s.code(), message)
                 : Unavailable(message);
    }
    EC_RETURN_IF_ERROR(WriteMarks(local, marks, covered, costs_version, calibration_count)
                           .WithContext("the central store has " + device.name() +
                                        "'s records; marking them sent in " + local.path() +
                                        " failed, so they are compared again at the next push"));
    if (options.progress) options.progress(device.name() + ": " + DescribeImport(*sent));
    summary.sent.push_back(std::move(*sent));
  }
  return summary;
}

Result<ImportSummary> PullFromStore(costdb::CostDb& local, const std::string& central, const std::string& device,
                                    const ImportOptions& import, const SyncOptions& options) {
  if (central == local.path()) return InvalidArgument("the central store is this database itself: " + costdb::RedactUrl(central));
  SyncOptions no_create = options;
  no_create.create = false;
  EC_ASSIGN_OR_RETURN(costdb::CostDb store, OpenCentralStore(central, no_create));
  EC_ASSIGN_OR_RETURN(v1::CostExport exported, ExportDevice(store, device));
  return ImportDevice(local, exported, import);
}

}  // namespace edgecost::service
