// Training graphs, cost sources and cost tables.
#include <map>
#include <string>
#include <vector>

#include "costdb/costdb.h"
#include "costdb/internal.h"
#include "graph/cost_checks.h"

namespace edgecost::costdb {
using namespace internal;

Result<int64_t> CostDb::CostSourceId(const std::string& name) {
  if (name.empty()) return InvalidArgument("a cost source name is required (e.g. poet-flops, measured)");
  EC_ASSIGN_OR_RETURN(Statement insert,
                      db_.Prepare("INSERT INTO cost_sources (name) VALUES (?) ON CONFLICT (name) DO NOTHING"));
  EC_RETURN_IF_ERROR(insert.Bind(1, name).Run());
  EC_ASSIGN_OR_RETURN(Statement select, db_.Prepare("SELECT id FROM cost_sources WHERE name = ?"));
  EC_ASSIGN_OR_RETURN(bool row, select.Bind(1, name).Step());
  if (!row) return Internal("cost source '" + name + "' vanished from " + path());
  return select.Int(0);
}

Result<int64_t> CostDb::PutModelGraph(const v1::TrainingGraph& graph) {
  if (graph.model().empty()) return InvalidArgument("a training graph needs a model name");
  const std::string blob = Serialize(graph);
  const std::string now = NowUtc();
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(
      Statement current,
      db_.Prepare("SELECT id, graph FROM models WHERE name = ? AND derivation = ? AND trainable = ? AND batch_size = ? "
                  "AND superseded_at IS NULL"));
  EC_ASSIGN_OR_RETURN(bool found, current.Bind(1, graph.model())
                                      .Bind(2, graph.derivation())
                                      .Bind(3, graph.trainable())
                                      .Bind(4, graph.batch_size())
                                      .Step());
  if (found && current.Blob(1) == blob) return current.Int(0);  // already stored; nothing to write
  if (found) {
    EC_ASSIGN_OR_RETURN(Statement supersede, db_.Prepare("UPDATE models SET superseded_at = ? WHERE id = ?"));
    EC_RETURN_IF_ERROR(supersede.Bind(1, now).Bind(2, current.Int(0)).Run());
  }
  EC_ASSIGN_OR_RETURN(
      Statement insert,
      db_.Prepare(
          "INSERT INTO models (name, derivation, trainable, batch_size, node_count, param_bytes, graph, created_at) "
          "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"));
  EC_RETURN_IF_ERROR(insert.Bind(1, graph.model())
                         .Bind(2, graph.derivation())
                         .Bind(3, graph.trainable())
                         .Bind(4, graph.batch_size())
                         .Bind(5, graph.nodes_size())
                         .Bind(6, graph.param_bytes())
                         .BindBlob(7, blob)
                         .Bind(8, now)
                         .Run());
  EC_ASSIGN_OR_RETURN(const int64_t id, db_.LastInsertId());
  EC_RETURN_IF_ERROR(tx.Commit());
  return id;
}

Result<std::vector<v1::TrainingGraph>> CostDb::ListModelGraphs() {
  EC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_.Prepare(
          "SELECT graph FROM models WHERE superseded_at IS NULL ORDER BY name, derivation, trainable, batch_size"));
  std::vector<v1::TrainingGraph> graphs;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    EC_ASSIGN_OR_RETURN(graphs.emplace_back(), Parse<v1::TrainingGraph>(stmt.Blob(0), "graph", path()));
    return Status::Ok();
  }));
  return graphs;
}

Result<int64_t> CostDb::PutCostTable(const v1::CostTable& table) {
  const int nodes = table.graph().nodes_size();
  if (table.costs_size() != nodes) {
    return InvalidArgument("cost table has " + std::to_string(table.costs_size()) + " costs for " +
                           std::to_string(nodes) + " nodes");
  }
  EC_RETURN_IF_ERROR(graph::ValidateCostTable(table, "the cost table of " + table.graph().model()));
  const std::string& hash = table.fingerprint_hash();
  if (hash.empty()) return InvalidArgument("a cost table needs the fingerprint of its device");
  const std::string now = NowUtc();

  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(FingerprintRow fingerprint, FindFingerprint(hash));
  if (!table.device().empty() && fingerprint.device != table.device()) {
    return InvalidArgument("fingerprint " + hash + " belongs to device '" + fingerprint.device + "', not '" +
                           table.device() + "'");
  }
  EC_ASSIGN_OR_RETURN(int64_t model_id, PutModelGraph(table.graph()));
  EC_ASSIGN_OR_RETURN(int64_t source_id, CostSourceId(table.cost_source()));

  EC_ASSIGN_OR_RETURN(
      Statement supersede,
      db_.Prepare(
          "UPDATE cost_tables SET superseded_at = ? WHERE model_id = ? AND fingerprint_id = ? AND cost_source_id = ? "
          "AND threads = ? AND superseded_at IS NULL"));
  EC_RETURN_IF_ERROR(supersede.Bind(1, now)
                         .Bind(2, model_id)
                         .Bind(3, fingerprint.id)
                         .Bind(4, source_id)
                         .Bind(5, table.threads())
                         .Run());
  EC_ASSIGN_OR_RETURN(
      Statement insert,
      db_.Prepare(
          "INSERT INTO cost_tables (model_id, fingerprint_id, cost_source_id, note, paging, created_at, threads) "
          "VALUES (?, ?, ?, ?, ?, ?, ?)"));
  insert.Bind(1, model_id).Bind(2, fingerprint.id).Bind(3, source_id).Bind(4, table.note()).Bind(6, now);
  insert.Bind(7, table.threads());
  if (table.has_paging()) {
    insert.BindBlob(5, Serialize(table.paging()));
  } else {
    insert.Bind(5, nullptr);
  }
  EC_RETURN_IF_ERROR(insert.Run());
  EC_ASSIGN_OR_RETURN(const int64_t table_id, db_.LastInsertId());
  EC_ASSIGN_OR_RETURN(Statement node, db_.Prepare("INSERT INTO node_costs (cost_table_id, node, runtime_s, compute_j, "
                                                  "ram_bytes, page_in_j, page_out_j, op_key) "
                                                  "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"));
  for (const v1::NodeCost& cost : table.costs()) {
    EC_RETURN_IF_ERROR(node.Bind(1, table_id)
                           .Bind(2, cost.node())
                           .Bind(3, cost.runtime_s())
                           .Bind(4, cost.compute_j())
                           .Bind(5, cost.ram_bytes())
                           .Bind(6, cost.page_in_j())
                           .Bind(7, cost.page_out_j())
                           .Bind(8, cost.op_key())
                           .Run()
                           .WithContext("storing the cost of node " + std::to_string(cost.node())));
  }
  EC_RETURN_IF_ERROR(tx.Commit());
  return table_id;
}

Result<v1::CostTable> CostDb::GetCostTableById(int64_t id) {
  EC_ASSIGN_OR_RETURN(Transaction tx, Read());  // the header and the rows from one snapshot
  EC_ASSIGN_OR_RETURN(
      Statement head,
      db_.Prepare(
          "SELECT m.graph, d.name, f.hash, s.name, t.note, t.paging, t.threads FROM cost_tables t "
          "JOIN models m ON m.id = t.model_id JOIN fingerprints f ON f.id = t.fingerprint_id "
          "JOIN devices d ON d.id = f.device_id JOIN cost_sources s ON s.id = t.cost_source_id WHERE t.id = ?"));
  EC_ASSIGN_OR_RETURN(bool found, head.Bind(1, id).Step());
  if (!found) return NotFound("no cost table #" + std::to_string(id) + " in " + path());
  v1::CostTable table;
  EC_ASSIGN_OR_RETURN(*table.mutable_graph(), Parse<v1::TrainingGraph>(head.Blob(0), "graph", path()));
  table.set_device(head.Text(1));
  table.set_fingerprint_hash(head.Text(2));
  table.set_cost_source(head.Text(3));
  table.set_note(head.Text(4));
  table.set_threads(static_cast<uint32_t>(head.Int(6)));
  if (!head.IsNull(5)) {
    EC_ASSIGN_OR_RETURN(*table.mutable_paging(), Parse<v1::PagingCost>(head.Blob(5), "paging cost", path()));
  }
  EC_ASSIGN_OR_RETURN(
      Statement rows,
      db_.Prepare("SELECT node, runtime_s, compute_j, ram_bytes, page_in_j, page_out_j, op_key FROM node_costs "
                  "WHERE cost_table_id = ? ORDER BY node"));
  rows.Bind(1, id);
  EC_RETURN_IF_ERROR(ForEachRow(rows, [&]() -> Status {
    v1::NodeCost& cost = *table.add_costs();
    cost.set_node(static_cast<uint32_t>(rows.Int(0)));
    cost.set_runtime_s(rows.Double(1));
    cost.set_compute_j(rows.Double(2));
    cost.set_ram_bytes(static_cast<uint64_t>(rows.Int(3)));
    cost.set_page_in_j(rows.Double(4));
    cost.set_page_out_j(rows.Double(5));
    cost.set_op_key(rows.Text(6));
    return Status::Ok();
  }));
  return table;
}

Result<std::vector<StoredCostTable>> CostDb::ListCostTables(const std::string& device) {
  EC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_.Prepare("SELECT t.id, m.name, d.name, s.name, m.batch_size, m.derivation, m.trainable, f.hash, m.node_count, "
                  "t.created_at, t.threads FROM cost_tables t JOIN models m ON m.id = t.model_id "
                  "JOIN fingerprints f ON f.id = t.fingerprint_id JOIN devices d ON d.id = f.device_id "
                  "JOIN cost_sources s ON s.id = t.cost_source_id "
                  "WHERE t.superseded_at IS NULL AND f.superseded_at IS NULL AND m.superseded_at IS NULL "
                  "AND (? = '' OR d.name = ?) ORDER BY t.id"));
  stmt.Bind(1, device).Bind(2, device);
  std::vector<StoredCostTable> tables;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    tables.push_back({.id = stmt.Int(0),
                      .key = {stmt.Text(1), stmt.Text(2), stmt.Text(3), static_cast<uint32_t>(stmt.Int(4)),
                              stmt.Text(5), stmt.Text(6), static_cast<uint32_t>(stmt.Int(10))},
                      .fingerprint_hash = stmt.Text(7),
                      .nodes = static_cast<int>(stmt.Int(8)),
                      .created_at = stmt.Text(9)});
    return Status::Ok();
  }));
  return tables;
}

namespace {

// The current tables of a key's graph, device and source, every thread count; callers add the rest.
constexpr char kCurrentTablesOfKey[] =
    "FROM cost_tables t JOIN models m ON m.id = t.model_id "
    "JOIN fingerprints f ON f.id = t.fingerprint_id JOIN devices d ON d.id = f.device_id "
    "JOIN cost_sources s ON s.id = t.cost_source_id "
    "WHERE m.name = ? AND d.name = ? AND s.name = ? AND m.batch_size = ? AND m.derivation = ? "
    "AND m.trainable = ? AND t.superseded_at IS NULL AND f.superseded_at IS NULL AND m.superseded_at IS NULL ";

Statement& BindKey(Statement& stmt, const CostTableKey& key) {
  return stmt.Bind(1, key.model)
      .Bind(2, key.device)
      .Bind(3, key.cost_source)
      .Bind(4, key.batch_size)
      .Bind(5, key.derivation)
      .Bind(6, key.trainable);
}

}  // namespace

Result<v1::CostTable> CostDb::GetCostTable(const CostTableKey& key) {
  EC_ASSIGN_OR_RETURN(Transaction tx, Read());
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(std::string("SELECT t.id ") + kCurrentTablesOfKey +
                                                  "AND t.threads = ? ORDER BY t.id DESC LIMIT 1"));
  EC_ASSIGN_OR_RETURN(bool found, BindKey(stmt, key).Bind(7, key.threads).Step());
  if (!found) {
    return NotFound("no current " + key.cost_source + " cost table for " + key.model + " on " + key.device +
                    " (batch size " + std::to_string(key.batch_size) + ", derivation " + key.derivation +
                    ", trainable " + key.trainable +
                    (key.threads > 0 ? ", " + std::to_string(key.threads) + " threads" : "") + ") in " + path() +
                    ": compute one with `edgecost costs " + key.model + " --platform " + key.device +
                    " --store`, or profile the device");
  }
  return GetCostTableById(stmt.Int(0));
}

Result<std::vector<uint32_t>> CostDb::CostTableThreads(const CostTableKey& key) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(std::string("SELECT DISTINCT t.threads ") + kCurrentTablesOfKey +
                                                  "ORDER BY t.threads"));
  BindKey(stmt, key);
  std::vector<uint32_t> threads;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    threads.push_back(static_cast<uint32_t>(stmt.Int(0)));
    return Status::Ok();
  }));
  return threads;
}

Result<std::vector<std::string>> CostDb::ListModelsWithCosts(const std::string& fingerprint_hash,
                                                             const std::string& cost_source) {
  EC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_.Prepare("SELECT DISTINCT m.name FROM cost_tables t JOIN models m ON m.id = t.model_id "
                  "JOIN fingerprints f ON f.id = t.fingerprint_id JOIN cost_sources s ON s.id = t.cost_source_id "
                  "WHERE f.hash = ? AND s.name = ? AND t.superseded_at IS NULL ORDER BY m.name"));
  stmt.Bind(1, fingerprint_hash).Bind(2, cost_source);  // a binding error surfaces at the first step
  std::vector<std::string> names;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    names.push_back(stmt.Text(0));
    return Status::Ok();
  }));
  return names;
}

}  // namespace edgecost::costdb
