// Fuzz target for the files users hand to the CLI: graph files
// (training-graph/v1 and networkx node-link JSON) on their way to a schedule,
// schedule files through what `edgecost check` does, and model files as
// `edgecost models add` and AddModel read them before storing them.
//
// Input: byte 0 picks the kind (modulo 3: 0 a graph file, 1 a schedule file,
// 2 a model file); the rest is the file. Oracle: no crash, no sanitizer report; a graph that reads
// gives a problem whose baseline schedules the independent simulator accepts.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/json_util.h>

#include "graph/graph_io.h"
#include "graph/resolve.h"
#include "service/cost_tables.h"
#include "solver/problem.h"
#include "solver/simulator.h"
#include "solver/solve.h"

namespace edgecost {
namespace {

constexpr int kMaxNodesToSolve = 64;  // larger graphs are read and checked, not solved, to keep inputs fast

void FuzzGraphFile(const std::string& text) {
  Result<v1::CostTable> table = graph::ParseCostTableJson(text, "fuzz.json");
  if (!table.ok() || table->graph().nodes_size() > kMaxNodesToSolve) return;
  uint64_t total_bytes = 0;
  for (const v1::NodeCost& cost : table->costs()) total_bytes += cost.ram_bytes();
  v1::ScheduleRequest request;
  request.set_ram_budget_bytes(total_bytes / 2 + 1);
  request.set_runtime_budget_multiple(1.5);
  Result<solver::Problem> problem = solver::ProblemFromCostTable(*table, request);
  if (!problem.ok()) return;
  for (const char* strategy : {"checkpoint-all", "sqrt", "paging-only"}) {
    solver::SolveOptions options;
    options.strategy = strategy;
    Result<v1::Schedule> schedule = solver::Solve(*problem, options);
    if (!schedule.ok() || schedule->stages_size() == 0) continue;
    // Solve replays what it returns; replaying it again must agree.
    if (!solver::Simulate(*problem, *schedule).valid) std::abort();
  }
}

void FuzzScheduleFile(const std::string& text) {
  v1::Schedule schedule;
  if (!google::protobuf::util::JsonStringToMessage(text, &schedule).ok()) return;
  // A schedule names its cost table by its request: a file path would make the
  // fuzzer read files, and measured costs need a database; both are refused here.
  if (!schedule.request().graph_file().empty() || schedule.request().cost_source() == "measured") return;
  if (schedule.stages_size() > 1 << 16) return;  // checked against the node count, which is bounded anyway
  (void)service::CheckSchedule(nullptr, schedule);
}

// What AddModel checks before it stores a model, then what every command does with a stored one.
void FuzzModelFile(const std::string& bytes) {
  Result<graph::StoredModelKind> kind = graph::DetectModelKind(bytes, "model 'fuzz'");
  if (!kind.ok()) return;
  graph::GraphSpec spec;
  spec.model_or_file = "fuzz";
  spec.stored = std::make_shared<graph::StoredModel>(graph::StoredModel{"fuzz", *kind, bytes, ""});
  Result<v1::TrainingGraph> graph = graph::LoadTrainingGraph(spec);
  if (!graph.ok()) std::abort();  // read once, it must read again
  if (*kind != graph::StoredModelKind::kOnnx) FuzzGraphFile(bytes);
}

}  // namespace
}  // namespace edgecost

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0:
      edgecost::FuzzGraphFile(text);
      break;
    case 1:
      edgecost::FuzzScheduleFile(text);
      break;
    default:
      edgecost::FuzzModelFile(text);
  }
  return 0;
}
