#include <iostream>

#include "base/units.h"
#include "cli/cli.h"
#include "cli/table.h"
#include "graph/derive.h"
#include "graph/zoo.h"
#include "service/cost_tables.h"

namespace edgecost::cli {
namespace {

struct ModelsFlags {
  int batch_size = 1;
  bool json = false;
};

int RunModels(const ModelsFlags& flags) {
  auto response = service::DescribeZoo(flags.batch_size);
  if (!response.ok()) return Failure(response.status());
  if (flags.json) {
    PrintJson(*response);
    return kExitOk;
  }
  Table table({{"model", Table::Align::kLeft},
               {"forward"},
               {"training (exact)"},
               {"training (poet)"},
               {"parameters"},
               {"activations"},
               {"description", Table::Align::kLeft}});
  for (int i = 0; i < response->models_size(); ++i) {
    const v1::ModelInfo& info = response->models(i);
    const graph::ZooModel& model = graph::ZooModels()[static_cast<size_t>(i)];
    auto poet = graph::ZooTrainingGraph(model.name, model.BatchSize(flags.batch_size), graph::Derivation::kPoet);
    if (!poet.ok()) return Failure(poet.status());
    table.AddRow({info.name(), std::to_string(info.forward_nodes()), std::to_string(info.training_nodes()),
                  std::to_string(poet->nodes_size()), FormatBytes(static_cast<double>(info.param_bytes())),
                  FormatBytes(static_cast<double>(info.activation_bytes())), std::string(model.description)});
  }
  table.Print(std::cout);
  std::cout << "\nActivations: outputs of the forward nodes and the loss at batch size " << flags.batch_size
            << " (bert and transformer: one sequence), f32.\n";
  return kExitOk;
}

}  // namespace

void RegisterModelsCommand(CLI::App& app, Context& ctx) {
  auto flags = std::make_shared<ModelsFlags>();
  CLI::App* cmd = app.add_subcommand("models", "List the model zoo: node counts, parameter and activation bytes");
  cmd->add_option("--batch-size", flags->batch_size, "Batch size")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("--json", flags->json, "Print protobuf JSON (ListModelsResponse)");
  cmd->footer("Example:\n  edgecost models --batch-size 8");
  cmd->callback([flags, &ctx] { ctx.exit_code = LocalOnly(ctx, [&] { return RunModels(*flags); }); });
}

}  // namespace edgecost::cli
