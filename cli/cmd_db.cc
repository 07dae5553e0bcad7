#include <unistd.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/files.h"
#include "base/units.h"
#include "cli/cli.h"
#include "cli/table.h"
#include "costdb/costdb.h"
#include "costdb/postgres.h"
#include "proto/json.h"
#include "service/cost_export.h"
#include "service/sync.h"
#include "service/profile_job.h"  // ThisDevice

namespace edgecost::cli {
namespace {

// The file, its schema and size, then what it holds: devices with their
// fingerprints, current cost tables, schedules and profiling runs.
int RunDbInfo(const Context& ctx, bool json) {
  auto opened = ctx.Store(costdb::OpenMode::kReadOnly).Db();
  if (!opened.ok()) return Failure(opened.status());
  costdb::CostDb* db = *opened;
  auto info = db->Info();
  auto devices = db->ListDevices();
  auto tables = db->ListCostTables();
  auto schedules = db->ListSchedules();
  auto runs = db->ListRuns();
  for (const Status& s : {info.status(), devices.status(), tables.status(), schedules.status(), runs.status()}) {
    if (!s.ok()) return Failure(s);
  }
  if (json) {
    nlohmann::json doc = {{"backend", info->backend},
                          {"path", info->path},
                          {"schemaVersion", info->schema_version},
                          {"fileBytes", info->file_size_bytes},
                          {"journalMode", info->journal_mode},
                          {"rows", info->row_counts},
                          {"devices", nlohmann::json::array()},
                          {"costTables", nlohmann::json::array()},
                          {"schedules", nlohmann::json::array()},
                          {"runs", nlohmann::json::array()}};
    for (const v1::Device& d : *devices) doc["devices"].push_back(nlohmann::json::parse(*proto::ToJson(d)));
    for (const costdb::StoredCostTable& t : *tables) {
      doc["costTables"].push_back({{"id", t.id},
                                   {"model", t.key.model},
                                   {"device", t.key.device},
                                   {"costSource", t.key.cost_source},
                                   {"batchSize", t.key.batch_size},
                                   {"derivation", t.key.derivation},
                                   {"trainable", t.key.trainable},
                                   {"threads", t.key.threads},
                                   {"fingerprintHash", t.fingerprint_hash},
                                   {"nodes", t.nodes},
                                   {"createdAt", t.created_at}});
    }
    for (const costdb::StoredSchedule& s : *schedules) {
      doc["schedules"].push_back({{"id", s.id},
                                  {"model", s.request.model()},
                                  {"device", s.request.device()},
                                  {"status", v1::Schedule::Status_Name(s.status)},
                                  {"energyJ", s.energy_j},
                                  {"superseded", s.superseded},
                                  {"createdAt", s.created_at}});
    }
    for (const costdb::StoredRun& r : *runs) {
      doc["runs"].push_back({{"id", r.id},
                             {"fingerprintHash", r.fingerprint_hash},
                             {"costSource", r.cost_source},
                             {"status", costdb::RunStatusText(r.status)},
                             {"startedAt", r.started_at},
                             {"finishedAt", r.finished_at}});
    }
    std::cout << doc.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << "backend        " << info->backend << "\n"
            << "path           " << info->path << "\n"
            << "schema         version " << info->schema_version << "\n"
            << "size           " << FormatBytes(static_cast<double>(info->file_size_bytes));
  if (info->journal_mode.empty()) {
    std::cout << " (tables with their indexes)\n";
  } else {
    std::cout << ", journal " << info->journal_mode << "\n";
  }

  std::cout << "\ndevices\n";
  Table device_table({{"name", Table::Align::kLeft},
                      {"kind", Table::Align::kLeft},
                      {"fingerprint", Table::Align::kLeft},
                      {"hardware", Table::Align::kLeft},
                      {"earlier fingerprints"}});
  for (const v1::Device& d : *devices) {
    const v1::Fingerprint& f = d.fingerprint();
    const bool measured = d.kind() == v1::Device::KIND_MEASURED;
    device_table.AddRow({d.name(), measured ? "measured" : "preset", f.hash(),
                         measured ? f.cpu_model() + ", " + std::to_string(f.online_cores()) + " cores"
                                  : "board preset " + f.board_preset(),
                         std::to_string(std::max(0, d.history_size() - 1))});
  }
  device_table.Print(std::cout);

  std::cout << "\ncost tables (current)\n";
  Table cost_table({{"#"},
                    {"model", Table::Align::kLeft},
                    {"device", Table::Align::kLeft},
                    {"source", Table::Align::kLeft},
                    {"derivation", Table::Align::kLeft},
                    {"batch"},
                    {"trainable", Table::Align::kLeft},
                    {"threads"},
                    {"nodes"},
                    {"created", Table::Align::kLeft}});
  for (const costdb::StoredCostTable& t : *tables) {
    cost_table.AddRow({std::to_string(t.id), t.key.model, t.key.device, t.key.cost_source, t.key.derivation,
                       std::to_string(t.key.batch_size), t.key.trainable,
                       t.key.threads > 0 ? std::to_string(t.key.threads) : "-", std::to_string(t.nodes), t.created_at});
  }
  cost_table.Print(std::cout);
  std::cout << "(threads: the compute threads a table was measured at; - for an analytic table or one stored "
               "before thread counts were kept)\n";

  std::cout << "\nschedules\n";
  Table schedule_table({{"#"},
                        {"model", Table::Align::kLeft},
                        {"device", Table::Align::kLeft},
                        {"status", Table::Align::kLeft},
                        {"energy"},
                        {"created", Table::Align::kLeft}});
  for (const costdb::StoredSchedule& s : *schedules) {
    if (s.superseded) continue;
    const char* status = s.status == v1::Schedule::STATUS_OPTIMAL    ? "optimal"
                         : s.status == v1::Schedule::STATUS_FEASIBLE ? "feasible"
                                                                     : "no schedule";
    schedule_table.AddRow({std::to_string(s.id), s.request.model().empty() ? s.request.graph_file() : s.request.model(),
                           s.request.device(), status, FormatJoules(s.energy_j), s.created_at});
  }
  schedule_table.Print(std::cout);

  std::cout << "\nprofiling runs\n";
  Table run_table({{"#"},
                   {"fingerprint", Table::Align::kLeft},
                   {"source", Table::Align::kLeft},
                   {"status", Table::Align::kLeft},
                   {"started", Table::Align::kLeft}});
  for (const costdb::StoredRun& r : *runs) {
    run_table.AddRow(
        {std::to_string(r.id), r.fingerprint_hash, r.cost_source, costdb::RunStatusText(r.status), r.started_at});
  }
  run_table.Print(std::cout);

  std::cout << "\nrows per table\n";
  Table rows({{"table", Table::Align::kLeft}, {"rows"}});
  for (const auto& [name, count] : info->row_counts) rows.AddRow({name, std::to_string(count)});
  rows.Print(std::cout);
  return kExitOk;
}

// .json: JSON; .pb or .binpb: plain protobuf; anything else (and stdout): gzip-compressed protobuf.
service::ExportFormat FormatOf(const std::string& path, bool json) {
  if (json || path.ends_with(".json")) return service::ExportFormat::kJson;
  if (path.ends_with(".pb") || path.ends_with(".binpb")) return service::ExportFormat::kProtobuf;
  return service::ExportFormat::kBinary;
}

std::string ExportCounts(const v1::CostExport& exported) {
  std::string models;
  for (const v1::ExportedModel& m : exported.models()) models += (models.empty() ? "" : ", ") + m.name();
  return std::to_string(exported.op_costs_size() + exported.earlier_op_costs_size()) + " op costs, " +
         std::to_string(exported.cost_tables_size()) + " cost tables, " + std::to_string(exported.runs_size()) +
         " runs, " + std::to_string(exported.schedules_size()) + " schedules, " +
         std::to_string(exported.train_runs_size()) + " training runs and " +
         (models.empty() ? std::string("no stored models") : "the models " + models);
}

int RunDbExport(const Context& ctx, const std::string& device, const std::string& out_path, bool json) {
  const bool to_stdout = out_path.empty() || out_path == "-";
  const service::ExportFormat format = FormatOf(out_path, json);
  if (to_stdout && format != service::ExportFormat::kJson && ::isatty(STDOUT_FILENO)) {
    return Failure(InvalidArgument("the export is binary (gzip-compressed protobuf): give --out FILE, redirect "
                                   "stdout, or pass --json"));
  }
  auto opened = ctx.Store(costdb::OpenMode::kReadOnly).Db();
  if (!opened.ok()) return Failure(opened.status());
  costdb::CostDb* db = *opened;
  auto exported = service::ExportDevice(*db, device);
  if (!exported.ok()) return Failure(exported.status());
  auto bytes = service::EncodeExport(*exported, format);
  if (!bytes.ok()) return Failure(bytes.status());
  if (to_stdout) {
    std::cout << *bytes;
    return kExitOk;
  }
  // A failed export leaves no half file.
  if (Status written = WriteFileAtomically(out_path, *bytes); !written.ok()) return Failure(written);
  std::cerr << "exported " << ExportCounts(*exported) << " of " << device << " (fingerprint "
            << exported->device().fingerprint().hash() << ") to " << out_path << " ("
            << FormatBytes(static_cast<double>(bytes->size())) << ", "
            << (format == service::ExportFormat::kJson       ? "JSON"
                : format == service::ExportFormat::kProtobuf ? "protobuf"
                                                             : "gzip-compressed protobuf")
            << ")\n";
  return kExitOk;
}

int RunDbImport(const Context& ctx, const std::string& path, bool replace) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Failure(NotFound("cannot read " + path));
  std::stringstream text;
  text << in.rdbuf();
  auto exported = service::DecodeExport(text.str(), path);
  if (!exported.ok()) return Failure(exported.status());
  auto opened = ctx.Store(costdb::OpenMode::kReadWrite).Db();
  if (!opened.ok()) return Failure(opened.status());
  costdb::CostDb* db = *opened;
  const service::ImportOptions options{.host = service::ThisDevice(service::DefaultPagingDir(db->path())),
                                       .replace = replace};
  auto summary = service::ImportDevice(*db, *exported, options);
  if (!summary.ok()) return Failure(summary.status());
  std::cout << "imported       device " << summary->device << ": " << service::DescribeImport(*summary) << " into "
            << db->path() << "\n"
            << "next           edgecost solve --model MODEL --device " << summary->device
            << " --ram-budget ... (plans with the costs measured there)\n";
  return kExitOk;
}

int RunDbPush(const Context& ctx, const std::string& central, bool create) {
  auto opened = ctx.Store(costdb::OpenMode::kReadWrite).Db();  // the marks of what was sent
  if (!opened.ok()) return Failure(opened.status());
  costdb::CostDb* db = *opened;
  service::SyncOptions options{.create = create,
                               .progress = [](const std::string& line) { std::cout << "pushed         " << line << "\n"; }};
  std::cerr << "pushing        " << costdb::RedactUrl(db->path()) << " -> " << costdb::RedactUrl(central) << "\n";
  auto pushed = service::PushToStore(*db, central, options);
  if (!pushed.ok()) {
    if (pushed.status().code() == ErrorCode::kUnavailable) {
      std::cerr << "unreachable    nothing was lost: what is not acknowledged is sent at the next push\n";
    }
    return Failure(pushed.status());
  }
  if (pushed->sent.empty()) {
    std::cout << "up to date     " << pushed->up_to_date << " measured device" << (pushed->up_to_date == 1 ? "" : "s")
              << ", nothing new since the last push\n";
  }
  return kExitOk;
}

int RunDbPull(const Context& ctx, const std::string& central, const std::string& device, bool replace) {
  auto opened = ctx.Store(costdb::OpenMode::kReadWrite).Db();
  if (!opened.ok()) return Failure(opened.status());
  costdb::CostDb* db = *opened;
  const service::ImportOptions import{.host = service::ThisDevice(service::DefaultPagingDir(db->path())),
                                      .replace = replace};
  auto pulled = service::PullFromStore(*db, central, device, import, {});
  if (!pulled.ok()) return Failure(pulled.status());
  std::cout << "pulled         device " << device << " from " << costdb::RedactUrl(central) << ": " << service::DescribeImport(*pulled)
            << "\n";
  return kExitOk;
}

}  // namespace

void RegisterDbCommand(CLI::App& app, Context& ctx) {
  CLI::App* db = app.add_subcommand("db", "Inspect the cost database, and move measured costs between databases");
  db->require_subcommand(1);
  db->footer(
      "Examples:\n"
      "  edgecost db info\n"
      "  edgecost db export pi4 --out pi4.costs          # on the board\n"
      "  edgecost db import pi4.costs                    # on the host; then solve --device pi4\n"
      "  edgecost db push /mnt/fleet/costs.db            # what this board measured, to a central store");

  auto json = std::make_shared<bool>(false);
  CLI::App* info = db->add_subcommand("info", "What the database holds: devices, cost tables, schedules, runs");
  info->add_flag("--json", *json, "Print JSON");
  info->footer("Examples:\n  edgecost db info\n  edgecost --db /tmp/costs.db db info --json");
  info->callback([json, &ctx] { ctx.exit_code = LocalOnly(ctx, [&] { return RunDbInfo(ctx, *json); }); });

  auto device = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto export_json = std::make_shared<bool>(false);
  CLI::App* exporter = db->add_subcommand(
      "export", "Write a measured device's costs, runs, schedules and the models they need to a file");
  exporter->add_option("device", *device, "Device name (see `edgecost db info`)")->required();
  exporter->add_option("--out", *out,
                       "File to write: gzip-compressed protobuf, or JSON for a .json name, or plain protobuf for .pb "
                       "(default: stdout)");
  exporter->add_flag("--json", *export_json, "Write JSON whatever the file's name");
  exporter->footer(
      "Examples:\n  edgecost db export pi4 --out pi4.costs\n  edgecost db export pi4 --out pi4-costs.json");
  exporter->callback([device, out, export_json, &ctx] {
    ctx.exit_code = LocalOnly(ctx, [&] { return RunDbExport(ctx, *device, *out, *export_json); });
  });

  auto path = std::make_shared<std::string>();
  auto replace = std::make_shared<bool>(false);
  CLI::App* importer = db->add_subcommand(
      "import", "Read a device's records written by `db export`, all or nothing; what is here already is skipped");
  importer->add_option("file", *path, "The exported file (any of its forms)")->required();
  importer->add_flag("--replace", *replace,
                     "Import a device named like this host or with its fingerprint (it replaces what was measured here)");
  importer->footer("Example:\n  edgecost db import pi4.costs");
  importer->callback(
      [path, replace, &ctx] { ctx.exit_code = LocalOnly(ctx, [&] { return RunDbImport(ctx, *path, *replace); }); });

  auto central = std::make_shared<std::string>();
  auto create = std::make_shared<bool>(false);
  CLI::App* pusher = db->add_subcommand(
      "push", "Send what this database measured and the central store has not acknowledged (the agent does this itself "
              "with [store] central)");
  pusher->add_option("store", *central, "The central store: a postgresql:// URL or a SQLite file")->required();
  pusher->add_flag("--create", *create, "Create a SQLite central store that does not exist yet");
  pusher->footer("Examples:\n  edgecost db push /mnt/fleet/costs.db\n  edgecost --db central.db solve --model mbv2 "
                 "--device pi4 --ram-budget 64MiB");
  pusher->callback(
      [central, create, &ctx] { ctx.exit_code = LocalOnly(ctx, [&] { return RunDbPush(ctx, *central, *create); }); });

  auto pull_central = std::make_shared<std::string>();
  auto pull_device = std::make_shared<std::string>();
  auto pull_replace = std::make_shared<bool>(false);
  CLI::App* puller = db->add_subcommand("pull", "Copy a device's records from a central store into this database");
  puller->add_option("store", *pull_central, "The central store: a postgresql:// URL or a SQLite file")->required();
  puller->add_option("--device", *pull_device, "The device to copy")->required();
  puller->add_flag("--replace", *pull_replace, "Copy a device named like this host or with its fingerprint");
  puller->footer("Example:\n  edgecost db pull /mnt/fleet/costs.db --device pi4");
  puller->callback([pull_central, pull_device, pull_replace, &ctx] {
    ctx.exit_code =
        LocalOnly(ctx, [&] { return RunDbPull(ctx, *pull_central, *pull_device, *pull_replace); });
  });
}

}  // namespace edgecost::cli
