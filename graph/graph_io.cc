#include "graph/graph_io.h"

#include <cmath>
#include <fstream>
#include <map>
#include <queue>
#include <sstream>

#include <nlohmann/json.hpp>

#include "graph/cost_source.h"
#include "graph/zoo.h"

namespace edgecost::graph {
namespace {

using nlohmann::json;

std::string NodeLabel(size_t index, const json& node) {
  std::string label = "node " + std::to_string(index);
  if (node.is_object() && node.contains("name") && node["name"].is_string()) {
    label += " ('" + node["name"].get<std::string>() + "')";
  }
  return label;
}

// Reads a required field of `node`, checking its type and sign.
class FieldReader {
 public:
  FieldReader(std::string_view origin, std::string where, const json& object)
      : origin_(origin), where_(std::move(where)), object_(object) {}

  Result<double> NonNegative(const char* field) const {
    EC_ASSIGN_OR_RETURN(const json* value, Get(field));
    if (!value->is_number()) return Error(std::string("'") + field + "' must be a number");
    const double v = value->get<double>();
    if (!std::isfinite(v) || v < 0) {
      return Error(std::string("'") + field + "' is " + value->dump() + "; costs must be finite and >= 0");
    }
    return v;
  }

  // A byte count: finite, >= 0 and at most kMaxTensorBytes, so that sums of
  // sizes stay exact; a fractional count is rounded up.
  Result<uint64_t> Bytes(const char* field) const {
    EC_ASSIGN_OR_RETURN(double v, NonNegative(field));
    if (v > static_cast<double>(kMaxTensorBytes)) {
      std::ostringstream bytes;
      bytes << v;
      return Error(std::string("'") + field + "' is " + bytes.str() + " bytes; at most " +
                   std::to_string(kMaxTensorBytes) + " (1 TiB) are allowed");
    }
    return static_cast<uint64_t>(std::ceil(v));
  }

  Result<bool> Bool(const char* field) const {
    EC_ASSIGN_OR_RETURN(const json* value, Get(field));
    if (!value->is_boolean()) return Error(std::string("'") + field + "' must be true or false");
    return value->get<bool>();
  }

  Result<std::string> String(const char* field) const {
    EC_ASSIGN_OR_RETURN(const json* value, Get(field));
    if (!value->is_string()) return Error(std::string("'") + field + "' must be a string");
    return value->get<std::string>();
  }

  Status Error(const std::string& what) const {
    return InvalidArgument(std::string(origin_) + ": " + where_ + ": " + what);
  }

 private:
  Result<const json*> Get(const char* field) const {
    if (!object_.is_object()) return Error("must be a JSON object");
    auto it = object_.find(field);
    if (it == object_.end()) return Error(std::string("missing field '") + field + "'");
    return &*it;
  }

  std::string_view origin_;
  std::string where_;
  const json& object_;
};

Status ParseError(std::string_view origin, const std::string& what) {
  return InvalidArgument(std::string(origin) + ": " + what);
}

// Adds node costs and a graph node; inputs are filled in by the caller.
void AddNode(v1::CostTable& table, const std::string& name, bool backward, double runtime_s, double compute_j,
             uint64_t ram_bytes, double page_in_j, double page_out_j) {
  v1::TrainingNode& node = *table.mutable_graph()->add_nodes();
  const uint32_t index = static_cast<uint32_t>(table.graph().nodes_size() - 1);
  node.set_index(index);
  node.set_name(name);
  node.set_phase(backward ? v1::PHASE_BACKWARD : v1::PHASE_FORWARD);
  node.set_output_bytes(ram_bytes);
  node.set_forward_of(-1);
  v1::NodeCost& cost = *table.add_costs();
  cost.set_node(index);
  cost.set_runtime_s(runtime_s);
  cost.set_compute_j(compute_j);
  cost.set_ram_bytes(ram_bytes);
  cost.set_page_in_j(page_in_j);
  cost.set_page_out_j(page_out_j);
}

Result<int64_t> EdgeEnd(std::string_view origin, const std::string& where, const json& value, size_t nodes) {
  if (!value.is_number_integer()) return ParseError(origin, where + ": node ids must be integers");
  const int64_t id = value.get<int64_t>();
  if (id < 0 || static_cast<size_t>(id) >= nodes) {
    return ParseError(origin, where + ": node " + std::to_string(id) + " does not exist (the graph has " +
                                  std::to_string(nodes) + " nodes)");
  }
  return id;
}

Result<v1::CostTable> ParseTrainingGraphV1(const json& doc, std::string_view origin) {
  const FieldReader top(origin, "top level", doc);
  v1::CostTable table;
  v1::TrainingGraph& graph = *table.mutable_graph();
  if (doc.contains("model")) {
    EC_ASSIGN_OR_RETURN(std::string model, top.String("model"));
    graph.set_model(model);
  }
  if (doc.contains("platform")) {
    EC_ASSIGN_OR_RETURN(std::string platform, top.String("platform"));
    table.set_device(platform);
  }
  EC_ASSIGN_OR_RETURN(std::string source, top.String("cost_source"));
  table.set_cost_source(source);
  if (source == kPoetFlopsSource) table.set_energy_source(v1::ENERGY_SOURCE_ESTIMATED);
  if (doc.contains("batch_size")) {
    EC_ASSIGN_OR_RETURN(uint64_t batch, top.Bytes("batch_size"));  // a count, bounded the same way
    if (batch > static_cast<uint64_t>(kMaxBatchSize)) {
      return top.Error("'batch_size' is at most " + std::to_string(kMaxBatchSize));
    }
    graph.set_batch_size(static_cast<uint32_t>(batch));
  }
  if (doc.contains("param_bytes")) {
    EC_ASSIGN_OR_RETURN(uint64_t param_bytes, top.Bytes("param_bytes"));
    graph.set_param_bytes(param_bytes);
  }
  graph.set_derivation("imported");
  if (!doc.contains("nodes") || !doc["nodes"].is_array()) return ParseError(origin, "missing array 'nodes'");
  if (!doc.contains("edges") || !doc["edges"].is_array()) return ParseError(origin, "missing array 'edges'");
  const json& nodes = doc["nodes"];
  for (size_t i = 0; i < nodes.size(); ++i) {
    const FieldReader field(origin, NodeLabel(i, nodes[i]), nodes[i]);
    EC_ASSIGN_OR_RETURN(std::string name, field.String("name"));
    EC_ASSIGN_OR_RETURN(bool backward, field.Bool("backward"));
    EC_ASSIGN_OR_RETURN(double runtime_s, field.NonNegative("runtime_s"));
    EC_ASSIGN_OR_RETURN(double compute_j, field.NonNegative("compute_j"));
    EC_ASSIGN_OR_RETURN(uint64_t ram_bytes, field.Bytes("ram_bytes"));
    EC_ASSIGN_OR_RETURN(double page_in_j, field.NonNegative("page_in_j"));
    EC_ASSIGN_OR_RETURN(double page_out_j, field.NonNegative("page_out_j"));
    AddNode(table, name, backward, runtime_s, compute_j, ram_bytes, page_in_j, page_out_j);
  }
  const json& edges = doc["edges"];
  for (size_t e = 0; e < edges.size(); ++e) {
    const std::string where = "edge " + std::to_string(e);
    if (!edges[e].is_array() || edges[e].size() != 2) return ParseError(origin, where + ": must be [u, v]");
    EC_ASSIGN_OR_RETURN(int64_t u, EdgeEnd(origin, where, edges[e][0], nodes.size()));
    EC_ASSIGN_OR_RETURN(int64_t v, EdgeEnd(origin, where, edges[e][1], nodes.size()));
    if (u >= v) {
      return ParseError(origin,
                        where + " [" + std::to_string(u) + ", " + std::to_string(v) +
                            "] does not go from a lower to a higher index: " + std::string(kTrainingGraphFormat) +
                            " lists nodes in topological order, so this is a cycle or a misordered node");
    }
    graph.mutable_nodes(static_cast<int>(v))->add_inputs(static_cast<uint32_t>(u));
  }
  return table;
}

// networkx node-link: node ids are arbitrary integers; the order is derived (Kahn's
// algorithm, smallest id first so that an already ordered file keeps its order).
Result<v1::CostTable> ParseNodeLink(const json& doc, std::string_view origin) {
  const json& nodes = doc["nodes"];
  const char* links_key = doc.contains("links") ? "links" : "edges";
  if (!doc.contains(links_key) || !doc[links_key].is_array()) return ParseError(origin, "missing array 'links'");
  std::map<int64_t, size_t> position_of_id;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!nodes[i].is_object() || !nodes[i].contains("id") || !nodes[i]["id"].is_number_integer()) {
      return ParseError(origin, NodeLabel(i, nodes[i]) + ": missing integer field 'id'");
    }
    if (!position_of_id.emplace(nodes[i]["id"].get<int64_t>(), i).second) {
      return ParseError(origin, NodeLabel(i, nodes[i]) + ": duplicate id " + nodes[i]["id"].dump());
    }
  }
  const json& links = doc[links_key];
  std::vector<std::vector<size_t>> succs(nodes.size());
  std::vector<std::vector<size_t>> preds(nodes.size());
  for (size_t e = 0; e < links.size(); ++e) {
    const std::string where = "link " + std::to_string(e);
    size_t ends[2];
    const char* keys[2] = {"source", "target"};
    for (int k = 0; k < 2; ++k) {
      if (!links[e].is_object() || !links[e].contains(keys[k]) || !links[e][keys[k]].is_number_integer()) {
        return ParseError(origin, where + ": missing integer field '" + keys[k] + "'");
      }
      auto it = position_of_id.find(links[e][keys[k]].get<int64_t>());
      if (it == position_of_id.end()) {
        return ParseError(origin, where + ": " + keys[k] + " " + links[e][keys[k]].dump() + " is not a node id");
      }
      ends[k] = it->second;
    }
    succs[ends[0]].push_back(ends[1]);
    preds[ends[1]].push_back(ends[0]);
  }
  // Topological order, smallest id first.
  std::vector<size_t> missing(nodes.size());
  using Item = std::pair<int64_t, size_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> ready;
  for (size_t i = 0; i < nodes.size(); ++i) {
    missing[i] = preds[i].size();
    if (missing[i] == 0) ready.push({nodes[i]["id"].get<int64_t>(), i});
  }
  std::vector<size_t> order;
  while (!ready.empty()) {
    const size_t i = ready.top().second;
    ready.pop();
    order.push_back(i);
    for (size_t s : succs[i]) {
      if (--missing[s] == 0) ready.push({nodes[s]["id"].get<int64_t>(), s});
    }
  }
  if (order.size() != nodes.size()) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (missing[i] > 0) return ParseError(origin, "the graph has a cycle through " + NodeLabel(i, nodes[i]));
    }
  }

  v1::CostTable table;
  table.set_cost_source("imported:networkx-node-link");
  table.set_energy_source(v1::ENERGY_SOURCE_ESTIMATED);  // energy in proportion to a compute cost
  table.set_note(
      "imported graph with one compute cost per node: cost_cpu is taken as the runtime and as the energy "
      "(so minimum energy is Checkmate's minimum compute), cost_ram as the output bytes, and page-in/out "
      "energy as 5 x cost_cpu (POET's convention for such graphs)");
  table.mutable_graph()->set_derivation("imported");
  if (doc.contains("graph") && doc["graph"].is_object() && doc["graph"].contains("name") &&
      doc["graph"]["name"].is_string()) {
    table.mutable_graph()->set_model(doc["graph"]["name"].get<std::string>());
  }
  std::vector<uint32_t> index_of(nodes.size());
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    const FieldReader field(origin, NodeLabel(i, nodes[i]), nodes[i]);
    std::string name = "node" + nodes[i]["id"].dump();
    if (nodes[i].contains("name")) {
      EC_ASSIGN_OR_RETURN(name, field.String("name"));
    }
    bool backward = false;
    if (nodes[i].contains("backward")) {
      EC_ASSIGN_OR_RETURN(backward, field.Bool("backward"));
    }
    EC_ASSIGN_OR_RETURN(double cost_cpu, field.NonNegative("cost_cpu"));
    EC_ASSIGN_OR_RETURN(uint64_t cost_ram, field.Bytes("cost_ram"));
    index_of[i] = static_cast<uint32_t>(k);
    AddNode(table, name, backward, cost_cpu, cost_cpu, cost_ram, kImportedPagingCostRatio * cost_cpu,
            kImportedPagingCostRatio * cost_cpu);
  }
  for (size_t k = 0; k < order.size(); ++k) {
    for (size_t p : preds[order[k]]) table.mutable_graph()->mutable_nodes(static_cast<int>(k))->add_inputs(index_of[p]);
  }
  return table;
}

}  // namespace

Result<v1::CostTable> ParseCostTableJson(std::string_view text, std::string_view origin) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {  // syntax, and numbers out of range such as 1e400
    return ParseError(origin, std::string("not valid JSON: ") + e.what());
  }
  if (!doc.is_object()) return ParseError(origin, "expected a JSON object");
  Result<v1::CostTable> table = [&]() -> Result<v1::CostTable> {
    if (doc.contains("format")) {
      if (!doc["format"].is_string() || doc["format"].get<std::string>() != kTrainingGraphFormat) {
        return ParseError(origin, "unknown format " + doc["format"].dump() + "; expected \"" +
                                      std::string(kTrainingGraphFormat) + "\"");
      }
      return ParseTrainingGraphV1(doc, origin);
    }
    if (doc.contains("nodes") && doc["nodes"].is_array() && (doc.contains("links") || doc.contains("directed"))) {
      return ParseNodeLink(doc, origin);
    }
    return ParseError(origin,
                      "neither training-graph/v1 (a 'format' field) nor networkx node-link JSON "
                      "('nodes' and 'links')");
  }();
  if (!table.ok()) return table;
  EC_RETURN_IF_ERROR(ValidateCostTable(*table, origin));
  return table;
}

Result<v1::CostTable> ReadCostTableFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read graph file '" + path + "': " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  return ParseCostTableJson(text.str(), path);
}

std::string CostTableToTrainingGraphJson(const v1::CostTable& table) {
  const v1::TrainingGraph& graph = table.graph();
  json doc = {{"format", kTrainingGraphFormat},   {"model", graph.model()},
              {"platform", table.device()},       {"cost_source", table.cost_source()},
              {"batch_size", graph.batch_size()}, {"param_bytes", graph.param_bytes()}};
  json nodes = json::array();
  json edges = json::array();
  for (int i = 0; i < graph.nodes_size(); ++i) {
    const v1::TrainingNode& node = graph.nodes(i);
    const v1::NodeCost& cost = table.costs(i);
    nodes.push_back({{"name", node.name()},
                     {"backward", node.phase() == v1::PHASE_BACKWARD},
                     {"runtime_s", cost.runtime_s()},
                     {"compute_j", cost.compute_j()},
                     {"ram_bytes", cost.ram_bytes()},
                     {"page_in_j", cost.page_in_j()},
                     {"page_out_j", cost.page_out_j()}});
  }
  // Edges sorted by source then target, as the reference files list them.
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  for (const v1::TrainingNode& node : graph.nodes()) {
    for (uint32_t input : node.inputs()) pairs.emplace_back(input, node.index());
  }
  std::sort(pairs.begin(), pairs.end());
  for (const auto& [u, v] : pairs) edges.push_back({u, v});
  doc["nodes"] = std::move(nodes);
  doc["edges"] = std::move(edges);
  return doc.dump(1) + "\n";
}

std::string TrainingGraphToDot(const v1::TrainingGraph& graph) {
  std::ostringstream out;
  out << "digraph \"" << graph.model() << "\" {\n  rankdir=LR;\n  node [shape=box, style=filled];\n";
  for (const v1::TrainingNode& node : graph.nodes()) {
    const char* color = node.phase() == v1::PHASE_BACKWARD ? "#f4cccc"
                        : node.phase() == v1::PHASE_LOSS   ? "#fff2cc"
                                                           : "#cfe2f3";
    out << "  n" << node.index() << " [label=\"" << node.index() << ": " << node.name() << "\", fillcolor=\"" << color
        << "\"];\n";
  }
  for (const v1::TrainingNode& node : graph.nodes()) {
    for (uint32_t input : node.inputs()) out << "  n" << input << " -> n" << node.index() << ";\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace edgecost::graph
