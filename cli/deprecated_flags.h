// Flags renamed so that one name has one meaning: the old spellings keep working, with a warning.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace edgecost::cli {

// The command line with each deprecated flag of its subcommand replaced by the current name, and a
// warning on `warnings` for each.
std::vector<std::string> ReplaceDeprecatedFlags(const CLI::App& app, const std::vector<std::string>& args,
                                                std::ostream& warnings);

}  // namespace edgecost::cli
