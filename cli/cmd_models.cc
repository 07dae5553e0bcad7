#include <iostream>

#include "base/units.h"
#include "cli/cli.h"
#include "cli/table.h"
#include "graph/derive.h"
#include "graph/zoo.h"

namespace edgecost::cli {
namespace {

struct ModelsFlags {
  int batch_size = 1;
  bool json = false;
};

int RunModels(const ModelsFlags& flags) {
  v1::ListModelsResponse response;
  Table table({{"model", Table::Align::kLeft},
               {"forward"},
               {"training (poet)"},
               {"training (exact)"},
               {"parameters"},
               {"activations"},
               {"description", Table::Align::kLeft}});
  for (const graph::ZooModel& model : graph::ZooModels()) {
    const int batch = (model.name == "bert" || model.name == "transformer") ? 1 : flags.batch_size;
    auto poet = graph::ZooTrainingGraph(model.name, batch, graph::Derivation::kPoet);
    auto exact = graph::ZooTrainingGraph(model.name, batch, graph::Derivation::kExact);
    if (!poet.ok()) return Failure(poet.status());
    if (!exact.ok()) return Failure(exact.status());
    v1::ModelInfo& info = *response.add_models();
    info.set_name(std::string(model.name));
    uint64_t activation_bytes = 0;
    for (const v1::TrainingNode& node : poet->nodes()) {
      if (node.phase() == v1::PHASE_FORWARD) {
        info.set_forward_nodes(info.forward_nodes() + 1);
        activation_bytes += node.output_bytes();
      }
    }
    info.set_training_nodes(static_cast<uint32_t>(poet->nodes_size()));
    info.set_param_bytes(poet->param_bytes());
    info.set_activation_bytes(activation_bytes);
    table.AddRow({info.name(), std::to_string(info.forward_nodes()), std::to_string(poet->nodes_size()),
                  std::to_string(exact->nodes_size()), FormatBytes(static_cast<double>(info.param_bytes())),
                  FormatBytes(static_cast<double>(activation_bytes)), std::string(model.description)});
  }
  if (flags.json) {
    PrintJson(response);
  } else {
    table.Print(std::cout);
    std::cout << "\nActivations: forward outputs at batch size " << flags.batch_size
              << " (bert and transformer: one sequence), f32.\n";
  }
  return kExitOk;
}

}  // namespace

void RegisterModelsCommand(CLI::App& app, Context& ctx) {
  auto flags = std::make_shared<ModelsFlags>();
  CLI::App* cmd = app.add_subcommand("models", "List the model zoo: node counts, parameter and activation bytes");
  cmd->add_option("--batch-size", flags->batch_size, "Batch size")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("--json", flags->json, "Print protobuf JSON (ListModelsResponse)");
  cmd->footer("Example:\n  edgecost models --batch-size 8");
  cmd->callback([flags, &ctx] { ctx.exit_code = RunModels(*flags); });
}

}  // namespace edgecost::cli
