#include "cli/deprecated_flags.h"

namespace edgecost::cli {
namespace {

struct DeprecatedFlag {
  const char* command;  // the subcommand path: "solve", "bench solver"
  const char* old_flag;
  const char* new_flag;
  const char* meaning;  // of the new flag, for the warning
};

// The one table of renamed flags. "RAM budget" is the training process's peak RSS and "activation
// budget" the saved activations'; "--threads" is the compute threads of the cost table and of the
// run everywhere, "--solver-threads" the MILP solver's.
constexpr DeprecatedFlag kDeprecatedFlags[] = {
    {"solve", "--device-ram", "--ram-budget", "the RAM budget, the training process's peak RSS"},
    {"solve", "--compute-threads", "--threads", "the compute threads of the cost table"},
    {"bench solver", "--threads", "--solver-threads", "the MILP solver's threads"},
    // The step's memory (parameters, gradients, optimizer state, workspace, activations), not the
    // process's peak RSS that --ram-budget is elsewhere.
    {"choose-update", "--ram-budget", "--memory-budget", "the training step's memory"},
};

const CLI::App* Subcommand(const CLI::App& app, const std::string& name) {
  const auto found = app.get_subcommands([&name](const CLI::App* sub) { return sub->get_name() == name; });
  return found.empty() ? nullptr : found.front();
}

}  // namespace

std::vector<std::string> ReplaceDeprecatedFlags(const CLI::App& app, const std::vector<std::string>& args,
                                                std::ostream& warnings) {
  std::vector<std::string> replaced;
  const CLI::App* command = &app;
  std::string path;  // the subcommands so far, "bench solver"
  for (const std::string& arg : args) {
    if (const CLI::App* sub = arg.starts_with("-") ? nullptr : Subcommand(*command, arg)) {
      command = sub;
      path += (path.empty() ? "" : " ") + arg;
      replaced.push_back(arg);
      continue;
    }
    std::string current = arg;
    for (const DeprecatedFlag& flag : kDeprecatedFlags) {
      const std::string old_flag = flag.old_flag;
      if (path != flag.command || (arg != old_flag && !arg.starts_with(old_flag + "="))) continue;
      current = flag.new_flag + arg.substr(old_flag.size());
      warnings << "edgecost: warning: `" << path << " " << old_flag << "` is deprecated; use " << flag.new_flag
               << " (" << flag.meaning << ")\n";
      break;
    }
    replaced.push_back(current);
  }
  return replaced;
}

}  // namespace edgecost::cli
