#include "service/cost_tables.h"

#include "graph/cost_source.h"
#include "graph/graph_io.h"
#include "graph/resolve.h"
#include "graph/zoo.h"
#include "profiler/profile.h"
#include "solver/problem.h"
#include "solver/solve.h"

namespace edgecost::service {

Result<v1::CostTable> ResolveCostTable(costdb::CostDb* db, const v1::GetCostTableRequest& request) {
  if (request.model().empty()) return InvalidArgument("model is required");
  const std::string device = request.device().empty() ? "this" : request.device();
  const bool preset = graph::FindBoardPreset(device).ok();
  std::string source = request.cost_source();
  if (source.empty()) source = preset ? std::string(graph::kPoetFlopsSource) : profiler::kMeasuredSource;
  std::string derivation = request.derivation();
  if (derivation.empty()) derivation = source == profiler::kMeasuredSource ? "exact" : "poet";

  graph::GraphSpec spec;
  spec.model_or_file = request.model();
  if (request.batch_size() > static_cast<uint32_t>(graph::kMaxBatchSize)) {
    return InvalidArgument("batch_size is at most " + std::to_string(graph::kMaxBatchSize));
  }
  spec.batch_size = request.batch_size() == 0 ? 1 : static_cast<int>(request.batch_size());
  EC_ASSIGN_OR_RETURN(spec.derivation, graph::ParseDerivation(derivation));
  EC_ASSIGN_OR_RETURN(spec.trainable,
                      graph::Trainable::Parse(request.trainable().empty() ? "all" : request.trainable()));
  if (graph::IsGraphFile(spec.model_or_file)) {
    return InvalidArgument("'" + spec.model_or_file + "' looks like a file; ask for a model by name");
  }
  if (source == profiler::kMeasuredSource) {
    if (db == nullptr) return FailedPrecondition("measured costs need the cost database");
    return profiler::LoadMeasuredCostTable(*db, spec, device);
  }
  if (!preset) {
    return InvalidArgument("cost source '" + source + "' needs a board preset as device, not '" + device + "'");
  }
  return graph::LoadCostTable(spec, device, source);
}

Result<v1::CostTable> CostTableForRequest(costdb::CostDb* db, const v1::ScheduleRequest& request) {
  if (!request.graph_file().empty()) return graph::ReadCostTableFile(request.graph_file());
  v1::GetCostTableRequest table;
  table.set_model(request.model());
  table.set_device(request.device());
  table.set_cost_source(request.cost_source());
  table.set_batch_size(request.batch_size());
  table.set_derivation(request.derivation());
  table.set_trainable(request.trainable());
  return ResolveCostTable(db, table);
}

Result<CheckedSchedule> CheckSchedule(costdb::CostDb* db, const v1::Schedule& schedule) {
  CheckedSchedule checked;
  EC_ASSIGN_OR_RETURN(v1::CostTable table, CostTableForRequest(db, schedule.request()));
  EC_ASSIGN_OR_RETURN(checked.problem, solver::ProblemFromCostTable(table, schedule.request()));
  checked.replay = solver::Simulate(checked.problem, schedule);
  return checked;
}

Result<StoredScheduleView> LoadStoredSchedule(costdb::CostDb& db, int64_t schedule_id) {
  StoredScheduleView view;
  EC_ASSIGN_OR_RETURN(view.schedule, db.GetSchedule(schedule_id));
  view.schedule.set_id(static_cast<uint64_t>(schedule_id));
  EC_ASSIGN_OR_RETURN(int64_t table_id, db.ScheduleCostTableId(schedule_id));
  if (table_id != 0) {
    EC_ASSIGN_OR_RETURN(view.table, db.GetCostTableById(table_id));
  } else {
    EC_ASSIGN_OR_RETURN(view.table, CostTableForRequest(&db, view.schedule.request()));
  }
  EC_ASSIGN_OR_RETURN(view.problem, solver::ProblemFromCostTable(view.table, view.schedule.request()));
  view.replay = solver::Simulate(view.problem, view.schedule);
  return view;
}

Result<v1::ListModelsResponse> DescribeZoo(int batch_size) {
  v1::ListModelsResponse response;
  for (const graph::ZooModel& model : graph::ZooModels()) {
    EC_ASSIGN_OR_RETURN(v1::TrainingGraph poet,
                        graph::ZooTrainingGraph(model.name, model.BatchSize(batch_size), graph::Derivation::kPoet));
    v1::ModelInfo& info = *response.add_models();
    info.set_name(std::string(model.name));
    uint64_t activation_bytes = 0;
    for (const v1::TrainingNode& node : poet.nodes()) {
      if (node.phase() != v1::PHASE_FORWARD) continue;
      info.set_forward_nodes(info.forward_nodes() + 1);
      activation_bytes += node.output_bytes();
    }
    info.set_training_nodes(static_cast<uint32_t>(poet.nodes_size()));
    info.set_param_bytes(poet.param_bytes());
    info.set_activation_bytes(activation_bytes);
  }
  return response;
}

Result<SolvedRequest> SolveRequest(costdb::CostDb* db, const v1::ScheduleRequest& request, bool store,
                                   const std::atomic<bool>* stop) {
  SolvedRequest solved;
  EC_ASSIGN_OR_RETURN(solved.table, CostTableForRequest(db, request));
  EC_ASSIGN_OR_RETURN(solved.problem, solver::ProblemFromCostTable(solved.table, request));
  solver::SolveOptions options;
  if (!request.strategy().empty()) options.strategy = request.strategy();
  if (request.time_limit_s() > 0) options.time_limit_s = request.time_limit_s();
  if (request.threads() > 0) options.threads = static_cast<int>(request.threads());
  options.stop = stop;
  EC_ASSIGN_OR_RETURN(solved.schedule, solver::Solve(solved.problem, options));
  *solved.schedule.mutable_request() = request;
  if (db && store) {
    EC_ASSIGN_OR_RETURN(int64_t request_id, db->PutScheduleRequest(request));
    EC_ASSIGN_OR_RETURN(int64_t table_id, db->PutCostTable(solved.table));
    EC_ASSIGN_OR_RETURN(solved.schedule_id, db->PutSchedule(request_id, table_id, solved.schedule));
  }
  return solved;
}

}  // namespace edgecost::service
