// `edgecost choose-update`: a sparse update chosen under budgets (service/update_choice.h).
#include <cstdio>
#include <iostream>

#include "cli/cli.h"
#include "cli/table.h"
#include "cli/train_flags.h"
#include "base/files.h"
#include "base/units.h"
#include "service/update_choice.h"

namespace edgecost::cli {
namespace {

struct ChooseFlags {
  std::string budget;
  double runtime_budget_multiple = 0, energy_budget_multiple = 0;
  std::string out;  // the chosen layers, one per line: what --trainable @FILE reads
  int probe_steps = 10;
  std::string scores_file;
  std::string shares = "0.25,0.5";
};

std::string Score(double score) {
  char text[32];
  std::snprintf(text, sizeof text, "%+.4f", score);
  return text;
}

void PrintChoice(const v1::UpdateChoice& choice) {
  const auto bytes = [](uint64_t b) { return b ? FormatBytes(static_cast<double>(b)) : std::string("-"); };
  std::cout << "budget         " << bytes(choice.budget_bytes()) << " of step memory (parameters, gradients, "
            << "optimizer state, workspace and activations); the full update holds " << bytes(choice.full_update_bytes())
            << "\n";
  std::cout << "scores         " << choice.score_source();
  if (choice.held_out_loss() > 0) std::cout << "; held-out loss before: " << choice.held_out_loss();
  std::cout << "\n\n";
  Table table({{"layer", Table::Align::kLeft},
               {"params"},
               {"score"},
               {"alone"},
               {"with the set"},
               {"step"},
               {"chosen", Table::Align::kLeft}});
  for (const v1::UpdateCandidate& c : choice.candidates()) {
    table.AddRow({c.layer(), bytes(c.param_bytes()), Score(c.score()), bytes(c.alone_bytes()), bytes(c.with_bytes()),
                  c.with_step_s() > 0 ? FormatSeconds(c.with_step_s()) : "-", c.chosen() ? "yes" : "no: " + c.reason()});
  }
  table.Print(std::cout);
  std::cout << "\nchosen         --trainable " << choice.trainable() << "\n"
            << "step memory    " << bytes(choice.chosen_bytes()) << " of the " << bytes(choice.budget_bytes())
            << " budget (" << static_cast<int>(100.0 * static_cast<double>(choice.chosen_bytes()) /
                                                static_cast<double>(std::max<uint64_t>(1, choice.full_update_bytes())))
            << "% of the full update's " << bytes(choice.full_update_bytes()) << ")\n";
  if (choice.full_step_s() > 0) {
    std::cout << "step           " << FormatSeconds(choice.chosen_step_s()) << ", " << FormatJoules(choice.chosen_step_j())
              << " (the full update: " << FormatSeconds(choice.full_step_s()) << ", "
              << FormatJoules(choice.full_step_j()) << ")\n";
  }
  if (choice.runtime_budget_s() > 0) {
    char runtime[32];
    std::snprintf(runtime, sizeof runtime, "%.3fms", choice.runtime_budget_s() * 1e3);
    std::cout << "train with     --trainable " << choice.trainable() << " --activation-budget "
              << choice.activation_bytes() << "B --runtime-budget " << runtime
              << " (a schedule holds its activations within the step time; profile it first with this --trainable)\n";
  }
  if (!choice.note().empty()) std::cout << "note           " << choice.note() << "\n";
}

int RunChooseUpdate(const TrainFlags& flags, const ChooseFlags& choose, const Context& ctx) {
  Result<v1::StartTrainRequest> request = TrainRequestOf(flags);
  Result<service::TrainJobOptions> mapped =
      request.ok() ? service::TrainJobOptionsOf(*request, ctx.Store(costdb::OpenMode::kReadWrite))
                   : Result<service::TrainJobOptions>(request.status());
  if (!mapped.ok()) return UsageError(mapped.status());
  service::UpdateChoiceOptions options{.train = *mapped};
  if (Status s = service::ParseUpdateBudget(choose.budget, options); !s.ok()) return UsageError(s);
  options.runtime_budget_multiple = choose.runtime_budget_multiple;
  options.energy_budget_multiple = choose.energy_budget_multiple;
  options.probe_steps = choose.probe_steps;
  options.scores_file = choose.scores_file;
  options.shares.clear();
  if (choose.shares != "none") {
    Result<std::vector<float>> shares = ParseFloatList(choose.shares, "--shares");
    if (!shares.ok()) return UsageError(shares.status());
    options.shares.assign(shares->begin(), shares->end());
  }
  Result<v1::UpdateChoice> choice =
      service::ChooseUpdate(options, [](const std::string& line) { std::cerr << line << "\n"; });
  if (!choice.ok()) return Failure(choice.status());
  if (!choose.out.empty()) {
    std::string lines = "# edgecost choose-update: --trainable @" + choose.out + " trains these\n";
    const std::string& layers = choice->trainable();
    for (size_t at = layers.find(':') + 1; at <= layers.size();) {
      const size_t comma = std::min(layers.find(',', at), layers.size());
      lines += layers.substr(at, comma - at) + "\n";
      at = comma + 1;
    }
    if (Status s = WriteFileAtomically(choose.out, lines); !s.ok()) return Failure(s);
  }
  if (flags.json) {
    PrintJson(*choice);
  } else {
    PrintChoice(*choice);
  }
  return kExitOk;
}

}  // namespace

void RegisterChooseUpdateCommand(CLI::App& app, Context& ctx) {
  auto flags = std::make_shared<TrainFlags>();
  auto choose = std::make_shared<ChooseFlags>();
  CLI::App* cmd = app.add_subcommand(
      "choose-update", "Choose the layers a fine-tuning run updates under a memory budget (a sparse update)");
  AddTrainingFlags(cmd, flags);
  cmd->add_option("--memory-budget", choose->budget,
                  "The step's memory for the update: parameters, gradients, optimizer state, workspace and "
                  "activations, in bytes (600kB) or as a share of the full update's (25%)")
      ->required();
  cmd->add_option("--runtime-budget", choose->runtime_budget_multiple,
                  "A multiple of the full update's step on this device's measured costs (profile first)");
  cmd->add_option("--energy-budget", choose->energy_budget_multiple,
                  "A multiple of the full update's step energy on this device's measured costs");
  cmd->add_option("--out", choose->out, "Write the chosen layers, one per line, for `train --trainable @FILE`");
  cmd->add_option("--probe-steps", choose->probe_steps,
                  "Steps the probe trains each layer alone for, from the model's weights on the first batches of "
                  "--data, scored by the held-out loss drop")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--shares", choose->shares,
                  "Shares of a convolution's or linear layer's output channels tried beside the whole layer (a "
                  "sparse tensor update, NAME:SHARE), or none")
      ->capture_default_str();
  cmd->add_option("--scores", choose->scores_file, "LAYER,SCORE lines instead of the probe (a higher score first)");
  cmd->add_flag("--json", flags->json, "Print the choice as protobuf JSON (UpdateChoice)");
  cmd->footer(
      "Each layer with parameters is scored alone (the Tiny Training Engine's contribution analysis), then\n"
      "layers are added best score per byte first while the step's memory stays within the budget.\n"
      "Example:\n"
      "  edgecost choose-update --model cnn.onnx --batch-size 32 --data tune.npz --val-split 0.2 \\\n"
      "      --optimizer adamw --lr 0.001 --memory-budget 25%\n"
      "      --out chosen.txt\n"
      "  edgecost train --model cnn.onnx ... --trainable @chosen.txt");
  cmd->callback([flags, choose, &ctx] { ctx.exit_code = RunChooseUpdate(*flags, *choose, ctx); });
}

}  // namespace edgecost::cli
