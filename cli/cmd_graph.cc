#include <iostream>
#include <sstream>

#include "base/units.h"
#include "cli/cli.h"
#include "cli/graph_flags.h"
#include "cli/table.h"
#include "graph/forward_graph.h"
#include "graph/graph_io.h"
#include "graph/layouts.h"
#include "service/models.h"

namespace edgecost::cli {
namespace {

struct GraphCommandFlags {
  GraphFlags graph;
  std::string format = "text";
  bool json = false;  // --json, as every command has: --format json
};

std::string PhaseName(v1::Phase phase) {
  switch (phase) {
    case v1::PHASE_FORWARD:
      return "fwd";
    case v1::PHASE_LOSS:
      return "loss";
    case v1::PHASE_BACKWARD:
      return "bwd";
    default:
      return "?";
  }
}

void PrintText(const v1::TrainingGraph& graph) {
  std::cout << graph.model() << ": " << graph.nodes_size() << " nodes, derivation " << graph.derivation()
            << ", trainable " << graph.trainable() << ", batch size " << graph.batch_size() << ", parameters "
            << FormatBytes(static_cast<double>(graph.param_bytes())) << "\n\n";
  Table table({{"#"},
               {"name", Table::Align::kLeft},
               {"phase", Table::Align::kLeft},
               {"op", Table::Align::kLeft},
               {"role", Table::Align::kLeft},
               {"shape", Table::Align::kLeft},
               {"layout", Table::Align::kLeft},
               {"output"},
               {"GFLOP"},
               {"inputs", Table::Align::kLeft}});
  for (const v1::TrainingNode& node : graph.nodes()) {
    std::ostringstream inputs;
    for (int i = 0; i < node.inputs_size(); ++i) inputs << (i ? "," : "") << node.inputs(i);
    std::ostringstream gflop;
    gflop.precision(4);
    gflop << node.flops() / 1e9;
    graph::Shape shape(node.output_shape().dims().begin(), node.output_shape().dims().end());
    // A forward node's output lies channels-last where derivation says so (graph/layouts.h); its
    // gradient lies alike.
    const auto nhwc = node.attributes().find(graph::kChannelsLastOutputAttribute);
    const std::string layout = nhwc != node.attributes().end() && nhwc->second != 0 ? "NHWC" : "";
    table.AddRow({std::to_string(node.index()), node.name(), PhaseName(node.phase()), node.op_kind(), node.role(),
                  graph::ShapeToString(shape), layout, FormatBytes(static_cast<double>(node.output_bytes())),
                  gflop.str(), inputs.str()});
  }
  table.Print(std::cout);
}

int RunGraph(const GraphCommandFlags& flags, const Context& ctx) {
  auto parsed = flags.graph.Spec();
  if (!parsed.ok()) return UsageError(parsed.status());
  auto spec = service::ResolveModel(ctx.Store(costdb::OpenMode::kReadOnly), *parsed);
  if (!spec.ok()) return Failure(spec.status());
  auto graph = graph::LoadTrainingGraph(*spec);
  if (!graph.ok()) return Failure(graph.status());
  if (flags.json || flags.format == "json") {
    PrintJson(*graph);
  } else if (flags.format == "dot") {
    std::cout << graph::TrainingGraphToDot(*graph);
  } else {
    PrintText(*graph);
  }
  return kExitOk;
}

}  // namespace

void RegisterGraphCommand(CLI::App& app, Context& ctx) {
  auto flags = std::make_shared<GraphCommandFlags>();
  CLI::App* cmd = app.add_subcommand("graph", "Show a model's training graph: forward, loss and backward nodes");
  flags->graph.AddTo(cmd);
  cmd->add_option("--format", flags->format, "text, json (protobuf TrainingGraph) or dot (Graphviz)")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json", "dot"}));
  cmd->add_flag("--json", flags->json, "Print protobuf JSON (TrainingGraph), as --format json");
  cmd->footer(
      "Examples:\n"
      "  edgecost graph resnet18_cifar\n"
      "  edgecost graph resnet18_cifar --derivation exact --trainable last:2\n"
      "  edgecost graph vgg16 --format dot | dot -Tsvg > vgg16.svg\n"
      "  edgecost graph my_model.onnx --json");
  cmd->callback([flags, &ctx] { ctx.exit_code = LocalOnly(ctx, [&] { return RunGraph(*flags, ctx); }); });
}

}  // namespace edgecost::cli
