// What several `edgecost bench` benchmarks share: a scratch directory, running a
// command for its output, exporting a torch model to ONNX, and the load average
// printed next to timings taken on a possibly shared machine.
#pragma once

#include <filesystem>
#include <string>

#include "base/status.h"

namespace edgecost::bench {

// A fresh directory under the system's temporary directory, removed on destruction.
struct Scratch {
  std::filesystem::path dir;
  explicit Scratch(const std::string& prefix);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

struct CommandOutput {
  int exit_status = -1;  // the shell's: 0 on success
  std::string output;    // stdout and stderr together
};
// Runs `command` through the shell, stderr folded into stdout.
Result<CommandOutput> RunCommand(const std::string& command);

// The ONNX file tests/graph/export_models.py (run from the repository) exports `model` to in `dir`, with `python`,
// at `batch` (0: its example's).
Result<std::string> ExportModel(const std::string& model, const std::string& python, const std::filesystem::path& dir,
                                int batch = 0);

// `model` as `train` and `profile` name it: a zoo name as is, or an ONNX file exported into
// `dir` by tests/graph/export_models.py (run from the repository) with `python`, at `batch` (some
// exports fix their batch).
Result<std::string> ModelArgument(const std::string& model, const std::string& python, const std::filesystem::path& dir,
                                  int batch);

// The 1-minute load average; 0 when it cannot be read.
double LoadAverage();

}  // namespace edgecost::bench
