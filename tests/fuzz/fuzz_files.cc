// Fuzz target for the files users hand to the CLI: graph files
// (training-graph/v1 and networkx node-link JSON) on their way to a schedule,
// schedule files through what `edgecost check` does, and model files as
// `edgecost models add` and AddModel read them before storing them, and cost exports as
// `edgecost db import` reads them into a database.
//
// Input: byte 0 picks the kind (modulo 5: 0 a graph file, 1 a schedule file,
// 2 a model file, 3 an ONNX model built from the rest: ops the importer takes, with random
// attributes, shapes and opset, 4 a cost export in any of its forms); the rest is the file.
// Oracle: no crash, no sanitizer report; a graph that reads gives a problem whose baseline
// schedules the independent simulator accepts; the import, isolated in its child process, always
// gives the caller a Result; an export that fails to import leaves the database as it was.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <string>
#include <vector>

#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/json_util.h>
#include <onnx/onnx_pb.h>

#include "costdb/costdb.h"
#include "graph/derive.h"
#include "graph/graph_io.h"
#include "graph/onnx/import.h"
#include "graph/resolve.h"
#include "service/cost_export.h"
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
  request.set_activation_budget_bytes(total_bytes / 2 + 1);
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

// Reads choices from the fuzz bytes; zeros once they run out.
class Choices {
 public:
  explicit Choices(const std::string& bytes) : bytes_(bytes) {}
  uint8_t Byte() { return at_ < bytes_.size() ? static_cast<uint8_t>(bytes_[at_++]) : 0; }
  int Pick(int n) { return n > 0 ? Byte() % n : 0; }
  int64_t Small() { return static_cast<int64_t>(Byte() % 11) - 3; }  // -3 .. 7: axes, extents, strides
  bool Done() const { return at_ >= bytes_.size(); }

 private:
  const std::string& bytes_;
  size_t at_ = 0;
};

// An ONNX model of the ops the importer takes, built from choices: the attributes, shapes and
// opsets an attacker controls while passing the op check, so the fuzzer reaches ONNX's inference.
std::string OnnxFromChoices(const std::string& bytes) {
  static const char* const kOps[] = {"Relu",
                                     "Clip",
                                     "Sigmoid",
                                     "Tanh",
                                     "HardSigmoid",
                                     "Add",
                                     "Mul",
                                     "Sub",
                                     "Div",
                                     "MatMul",
                                     "Gemm",
                                     "Conv",
                                     "MaxPool",
                                     "AveragePool",
                                     "GlobalAveragePool",
                                     "Flatten",
                                     "Reshape",
                                     "Squeeze",
                                     "Unsqueeze",
                                     "Transpose",
                                     "Concat",
                                     "Split",
                                     "Slice",
                                     "Gather",
                                     "Softmax",
                                     "ReduceMean",
                                     "LayerNormalization",
                                     "BatchNormalization",
                                     "Dropout",
                                     "Pad",
                                     "Cast",
                                     "Pow",
                                     "Sqrt",
                                     "Shape",
                                     "Expand",
                                     "ConstantOfShape",
                                     "Range",
                                     "Where",
                                     "Erf",
                                     "Identity"};
  static const char* const kIntAttributes[] = {"axis",      "group",     "keepdims", "transA",        "transB",
                                               "ceil_mode", "allowzero", "to",       "training_mode", "batch_dims"};
  static const char* const kIntsAttributes[] = {"axes",      "perm",  "kernel_shape", "strides", "pads",
                                                "dilations", "split", "starts",       "ends"};
  Choices c(bytes);
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(7 + c.Pick(12));  // 7 .. 18: refused ones too
  onnx::GraphProto& g = *model.mutable_graph();
  g.set_name("fuzz");
  std::vector<std::string> tensors = {"x"};
  onnx::ValueInfoProto& x = *g.add_input();
  x.set_name("x");
  x.mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  const int rank = 1 + c.Pick(4);
  for (int d = 0; d < rank; ++d) {
    x.mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(1 + c.Pick(6));
  }
  const int nodes = 1 + c.Pick(6);
  for (int n = 0; n < nodes && !c.Done(); ++n) {
    onnx::NodeProto& node = *g.add_node();
    node.set_op_type(kOps[c.Pick(std::size(kOps))]);
    const int inputs = 1 + c.Pick(3);
    for (int i = 0; i < inputs; ++i) {
      if (c.Pick(3) == 0) {  // a weight or constant of a random shape, some with data
        onnx::TensorProto& t = *g.add_initializer();
        t.set_name("w" + std::to_string(g.initializer_size()));
        const bool integer = c.Pick(3) == 0;
        t.set_data_type(integer ? onnx::TensorProto::INT64 : onnx::TensorProto::FLOAT);
        const int dims = c.Pick(5);
        int64_t elements = 1;
        for (int d = 0; d < dims; ++d) {
          const int64_t extent = c.Small() + 3;  // 0 .. 10
          t.add_dims(extent);
          elements *= extent;
        }
        if (elements <= 64) {
          for (int64_t e = 0; e < elements; ++e) {
            if (integer) {
              t.add_int64_data(c.Small());
            } else {
              t.add_float_data(static_cast<float>(c.Small()));
            }
          }
        }
        node.add_input(t.name());
      } else {
        node.add_input(tensors[c.Pick(static_cast<int>(tensors.size()))]);
      }
    }
    const int attributes = c.Pick(4);
    for (int a = 0; a < attributes; ++a) {
      onnx::AttributeProto& attr = *node.add_attribute();
      if (c.Pick(2)) {
        attr.set_name(kIntAttributes[c.Pick(std::size(kIntAttributes))]);
        attr.set_type(onnx::AttributeProto::INT);
        attr.set_i(c.Small());
      } else {
        attr.set_name(kIntsAttributes[c.Pick(std::size(kIntsAttributes))]);
        attr.set_type(onnx::AttributeProto::INTS);
        const int count = c.Pick(6);
        for (int i = 0; i < count; ++i) attr.add_ints(c.Small());
      }
    }
    const int outputs = node.op_type() == std::string("Split") ? 1 + c.Pick(3) : 1;
    for (int o = 0; o < outputs; ++o) {
      node.add_output("t" + std::to_string(n) + "_" + std::to_string(o));
      tensors.push_back(node.output(o));
    }
  }
  onnx::ValueInfoProto& y = *g.add_output();
  y.set_name(tensors.back());
  y.mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  return model.SerializeAsString();
}

void FuzzOnnxModel(const std::string& choices) {
  Result<graph::ForwardGraph> forward = graph::ImportOnnxBytes(OnnxFromChoices(choices), "fuzz.onnx", "fuzz");
  if (!forward.ok()) {
    if (forward.status().message().empty()) std::abort();  // every refusal says why
    return;
  }
  (void)graph::DeriveTrainingGraph(*forward, graph::kDefaultDerivation);  // what an imported graph goes on to
}

// One database for every export the process imports: a refused import must leave it as it was.
void FuzzCostExport(const std::string& bytes) {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("edgecost_fuzz_" + std::to_string(getpid()) + ".db")).string();
  static costdb::CostDb* const db = [] {
    auto opened = costdb::CostDb::Open(path);
    if (!opened.ok()) std::abort();
    std::atexit([] {
      for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
    });
    return new costdb::CostDb(std::move(*opened));
  }();
  Result<v1::CostExport> exported = service::DecodeExport(bytes, "fuzz.costs");
  if (!exported.ok()) return;
  const auto snapshot = [&] {  // all the database holds of the device, or "" when it holds nothing
    Result<v1::CostExport> held = service::ExportDevice(*db, exported->device().name());
    if (!held.ok()) return std::string();
    held->clear_exported_at();
    return held->SerializeAsString();
  };
  const std::string before = snapshot();
  Result<service::ImportSummary> imported = service::ImportDevice(*db, *exported, {});
  if (imported.ok()) return;
  if (imported.status().message().empty()) std::abort();  // every refusal says why
  if (snapshot() != before) std::abort();
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
  switch (data[0] % 5) {
    case 0:
      edgecost::FuzzGraphFile(text);
      break;
    case 1:
      edgecost::FuzzScheduleFile(text);
      break;
    case 2:
      edgecost::FuzzModelFile(text);
      break;
    case 3:
      edgecost::FuzzOnnxModel(text);
      break;
    default:
      edgecost::FuzzCostExport(text);
  }
  return 0;
}
