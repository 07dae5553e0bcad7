#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "base/units.h"
#include "cli/cli.h"
#include "cli/services.h"
#include "cli/table.h"
#include "costdb/costdb.h"
#include "daemon/client.h"
#include "graph/derive.h"
#include "graph/zoo.h"
#include "service/models.h"

namespace edgecost::cli {
namespace {

struct ModelsFlags {
  int batch_size = 1;
  bool json = false;
  // models add FILE --name N [--replace]; models remove N
  std::string file;
  std::string name;
  bool replace = false;
};

std::string Description(const std::string& name) {
  for (const graph::ZooModel& model : graph::ZooModels()) {
    if (model.name == name) return std::string(model.description);
  }
  return "";
}

// "2026-11-25" of "2026-11-25T06:41:57.123Z".
std::string Day(const std::string& time) { return time.substr(0, 10); }

int PrintModels(const v1::ListModelsResponse& response, const ModelsFlags& flags) {
  if (flags.json) {
    PrintJson(response);
    return kExitOk;
  }
  Table table({{"model", Table::Align::kLeft},
               {"kind", Table::Align::kLeft},
               {"forward"},
               {"training (exact)"},
               {"training (poet)"},
               {"parameters"},
               {"activations"},
               {"hash", Table::Align::kLeft},
               {"size"},
               {"added", Table::Align::kLeft},
               {"description", Table::Align::kLeft}});
  bool stored = false;
  for (const v1::ModelInfo& info : response.models()) {
    std::string poet_nodes;
    if (!info.stored()) {
      const graph::ZooModel* model = nullptr;
      for (const graph::ZooModel& m : graph::ZooModels()) model = m.name == info.name() ? &m : model;
      auto poet = graph::ZooTrainingGraph(info.name(), model ? model->BatchSize(flags.batch_size) : flags.batch_size,
                                          graph::Derivation::kPoet);
      if (poet.ok()) poet_nodes = std::to_string(poet->nodes_size());
    }
    stored = stored || info.stored();
    const bool described = info.error().empty();
    table.AddRow({info.name(), info.kind(), described ? std::to_string(info.forward_nodes()) : "",
                  described ? std::to_string(info.training_nodes()) : "", poet_nodes,
                  described ? FormatBytes(static_cast<double>(info.param_bytes())) : "",
                  described ? FormatBytes(static_cast<double>(info.activation_bytes())) : "", info.content_hash(),
                  info.stored() ? FormatBytes(static_cast<double>(info.size_bytes())) : "",
                  info.stored() ? Day(info.added_at()) : "",
                  info.stored() ? (described ? "" : "unreadable: " + info.error()) : Description(info.name())});
  }
  table.Print(std::cout);
  std::cout << "\nActivations: outputs of the forward nodes and the loss at batch size " << flags.batch_size
            << " (bert and transformer: one sequence; an ONNX model: its export's batch unless above 1), f32.\n";
  if (!stored) std::cout << "No stored models yet: `edgecost models add FILE --name NAME` imports one.\n";
  return kExitOk;
}

int RunList(const ModelsFlags& flags, const Context& ctx) {
  v1::ListModelsRequest request;
  request.set_batch_size(static_cast<uint32_t>(flags.batch_size));
  auto listed = Services(ctx).ListModels(request);
  if (!listed.ok()) return Failure(listed.status());
  return PrintModels(*listed, flags);
}

int PrintAdded(const v1::AddModelResponse& response, const ModelsFlags& flags, const std::string& where) {
  if (flags.json) {
    PrintJson(response);
    return kExitOk;
  }
  const v1::ModelInfo& info = response.model();
  if (response.outcome() == "unchanged") {
    std::cout << "unchanged      " << info.name() << " already holds these bytes (hash " << info.content_hash()
              << ", added " << info.added_at() << "): nothing to do\n";
    return kExitOk;
  }
  std::cout << response.outcome() << std::string(15 - std::min<size_t>(14, response.outcome().size()), ' ')
            << info.name() << " (" << info.kind() << ", " << BytesText(info.size_bytes()) << ", hash "
            << info.content_hash() << ") in " << where << "\n"
            << "graph          " << info.forward_nodes() << " forward nodes, " << info.training_nodes()
            << " training nodes (exact), batch size " << info.batch_size() << ", parameters "
            << FormatBytes(static_cast<double>(info.param_bytes())) << ", activations "
            << FormatBytes(static_cast<double>(info.activation_bytes())) << "\n"
            << "use it         by name, as a zoo model: edgecost "
            << (info.kind() == "onnx" ? "profile --model " + info.name() + "; edgecost solve --model " + info.name() +
                                            " --device this --ram-budget SIZE"
                                      : "solve --model " + info.name() + " --ram-budget SIZE")
            << "\n";
  return kExitOk;
}

int RunAdd(const ModelsFlags& flags, const Context& ctx) {
  std::ifstream in(flags.file, std::ios::binary);
  if (!in) return Failure(NotFound("cannot read " + flags.file));
  std::stringstream bytes;
  bytes << in.rdbuf();
  v1::AddModelRequest request;
  request.set_name(flags.name);
  request.set_model(bytes.str());
  request.set_replace(flags.replace);
  Services services(ctx);
  auto added = services.AddModel(request);
  if (!added.ok()) return Failure(added.status());
  return PrintAdded(*added, flags, services.where());
}

int RunRemove(const ModelsFlags& flags, const Context& ctx) {
  v1::RemoveModelRequest request;
  request.set_name(flags.name);
  if (auto removed = Services(ctx).RemoveModel(request); !removed.ok()) return Failure(removed.status());
  if (flags.json) {
    PrintJson(v1::RemoveModelResponse());
  } else {
    std::cout << "removed        " << flags.name << " (its cost tables and schedules stay stored)\n";
  }
  return kExitOk;
}

}  // namespace

void RegisterModelsCommand(CLI::App& app, Context& ctx) {
  auto flags = std::make_shared<ModelsFlags>();
  CLI::App* cmd = app.add_subcommand(
      "models", "List the models: the zoo and the models stored in the database (node counts, bytes, hashes)");
  cmd->require_subcommand(0, 1);
  cmd->add_option("--batch-size", flags->batch_size, "Batch size")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("--json", flags->json, "Print protobuf JSON (ListModelsResponse)");
  cmd->footer(
      "A stored model is named like a zoo model by every command (graph, costs, profile, solve, train, check)\n"
      "and over RPC.\n"
      "Examples:\n"
      "  edgecost models --batch-size 8\n"
      "  edgecost models add mobilenet_v2.onnx --name mnv2\n"
      "  edgecost models add resnet50.checkmate.json --name r50-checkmate\n"
      "  edgecost models remove mnv2\n"
      "  edgecost --remote unix:/run/edgecost/edgecost.sock models add my.onnx --name mine");

  CLI::App* add = cmd->add_subcommand(
      "add", "Store a model file in the database under a name: ONNX, training-graph/v1 or networkx node-link JSON");
  add->add_option("file", flags->file, "The model file")->required();
  add->add_option("--name", flags->name, "The name to use it by (letters, digits, '.', '_', '-')")->required();
  add->add_flag("--replace", flags->replace, "Replace a different model stored under the name");
  add->add_flag("--json", flags->json, "Print protobuf JSON (AddModelResponse)");
  add->footer(
      "Adding the same bytes again changes nothing; a different model under a stored name needs --replace\n"
      "(the old model's cost tables stay stored, no longer served). Zoo names are refused.\n"
      "Examples:\n"
      "  edgecost models add my.onnx --name mine\n"
      "  edgecost models add my-v2.onnx --name mine --replace\n"
      "  edgecost profile --model mine --batch-size 1 && edgecost solve --model mine --device this --activation-budget 2MB");
  add->callback([flags, &ctx] { ctx.exit_code = RunAdd(*flags, ctx); });

  CLI::App* remove = cmd->add_subcommand("remove", "Remove a stored model (its cost tables and schedules stay)");
  remove->add_option("name", flags->name, "The stored model")->required();
  remove->add_flag("--json", flags->json, "Print protobuf JSON (RemoveModelResponse)");
  remove->footer("Example:\n  edgecost models remove mine");
  remove->callback([flags, &ctx] { ctx.exit_code = RunRemove(*flags, ctx); });

  cmd->callback([flags, cmd, &ctx] {
    if (!cmd->get_subcommands().empty()) return;  // add or remove ran
    ctx.exit_code = RunList(*flags, ctx);
  });
}

}  // namespace edgecost::cli
