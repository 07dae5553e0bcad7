#include <iostream>

#include <nlohmann/json.hpp>

#include "base/units.h"
#include "cli/cli.h"
#include "cli/table.h"
#include "costdb/costdb.h"

namespace edgecost::cli {
namespace {

int RunDbInfo(const Context& ctx, bool json) {
  const std::string path = ctx.db_path.empty() ? costdb::DefaultDbPath() : ctx.db_path;
  auto db = costdb::CostDb::Open(path, costdb::OpenMode::kReadOnly);
  if (!db.ok()) return Failure(db.status());
  auto info = db->Info();
  if (!info.ok()) return Failure(info.status());
  if (json) {
    nlohmann::json doc = {{"path", info->path},
                          {"schemaVersion", info->schema_version},
                          {"fileBytes", info->file_size_bytes},
                          {"journalMode", info->journal_mode},
                          {"rows", info->row_counts}};
    std::cout << doc.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << "path           " << info->path << "\n"
            << "schema         version " << info->schema_version << "\n"
            << "size           " << FormatBytes(static_cast<double>(info->file_size_bytes)) << "\n"
            << "journal        " << info->journal_mode << "\n\n";
  Table table({{"table", Table::Align::kLeft}, {"rows"}});
  for (const auto& [name, rows] : info->row_counts) table.AddRow({name, std::to_string(rows)});
  table.Print(std::cout);
  return kExitOk;
}

}  // namespace

void RegisterDbCommand(CLI::App& app, Context& ctx) {
  CLI::App* db = app.add_subcommand("db", "Inspect the cost database");
  db->require_subcommand(1);
  auto json = std::make_shared<bool>(false);
  CLI::App* info = db->add_subcommand("info", "Path, schema version, size and row counts");
  info->add_flag("--json", *json, "Print JSON");
  info->footer("Example:\n  edgecost --db /tmp/costs.db db info");
  info->callback([json, &ctx] { ctx.exit_code = LocalOnly(ctx, [&] { return RunDbInfo(ctx, *json); }); });
}

}  // namespace edgecost::cli
