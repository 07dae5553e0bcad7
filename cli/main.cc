// edgecost: measure what training costs on a device, and schedule it to fit.
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/cli.h"
#include "cli/deprecated_flags.h"

int main(int argc, char** argv) {
  using namespace edgecost::cli;
  CLI::App app{
      "edgecost: per-device costs of neural-network training, and energy-optimal schedules\n"
      "that fit a RAM budget by recomputing and paging activations (POET, ICML 2022)."};
  app.require_subcommand(1);
  app.fallthrough();  // --db and --remote after the subcommand too: `edgecost db info --db X`
  app.set_version_flag("--version", "edgecost 0.1.0");
  Context ctx;
  app.add_option(
      "--remote", ctx.remote,
      "Run costs, solve and profile against a daemon: unix:PATH or http://HOST:PORT (token from $EDGECOST_TOKEN)");
  app.add_option("--db", ctx.db_path,
                 "Cost database: a file (default: $EDGECOST_DB, else $XDG_DATA_HOME/edgecost/edgecost.db), or a "
                 "postgresql://USER@HOST/DB URL of a store shared by many devices");
  app.add_flag("--verbose,-v", ctx.verbose,
               "Print every detail (each op as it is measured, each unreliable op with its reason), not a summary");
  app.footer(
      "Examples:\n"
      "  edgecost models\n"
      "  edgecost graph resnet18_cifar --derivation exact\n"
      "  edgecost costs resnet18_cifar --platform a72 --store\n"
      "  edgecost profile --model resnet18_cifar\n"
      "  edgecost db info");

  RegisterModelsCommand(app, ctx);
  RegisterGraphCommand(app, ctx);
  RegisterCostsCommand(app, ctx);
  RegisterSolveCommand(app, ctx);
  RegisterTraceCommand(app, ctx);
  RegisterProbesCommand(app, ctx);
  RegisterProfileCommand(app, ctx);
  RegisterCalibrateCommand(app, ctx);
  RegisterTrainCommand(app, ctx);
  RegisterChooseUpdateCommand(app, ctx);
  RegisterServeCommand(app, ctx);
  RegisterJobsCommand(app, ctx);
  RegisterDbCommand(app, ctx);
  RegisterBenchCommand(app, ctx);

  // Renamed flags keep working: rewritten here, in one place, with a warning.
  std::vector<std::string> args =
      ReplaceDeprecatedFlags(app, std::vector<std::string>(argv + 1, argv + argc), std::cerr);
  std::vector<char*> current_argv = {argv[0]};
  for (std::string& arg : args) current_argv.push_back(arg.data());
  try {
    app.parse(static_cast<int>(current_argv.size()), current_argv.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  return ctx.exit_code;
}
