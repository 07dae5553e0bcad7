#include "bench/bench_common.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "graph/zoo.h"

namespace edgecost::bench {

namespace fs = std::filesystem;

Scratch::Scratch(const std::string& prefix)
    : dir(fs::temp_directory_path() / (prefix + "_" + std::to_string(::getpid()))) {
  fs::remove_all(dir);
  fs::create_directories(dir);
}

Scratch::~Scratch() {
  std::error_code ignored;
  fs::remove_all(dir, ignored);
}

Result<CommandOutput> RunCommand(const std::string& command) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return Unavailable("cannot run: " + command);
  CommandOutput result;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe)) result.output += buffer;
  const int status = ::pclose(pipe);
  result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

Result<std::string> ExportModel(const std::string& model, const std::string& python, const fs::path& dir,
                                int batch) {
  const std::string exported = (dir / (model + ".onnx")).string();
  Result<CommandOutput> run = RunCommand(python + " tests/graph/export_models.py " + dir.string() + " " + model +
                                         (batch > 0 ? " --batch " + std::to_string(batch) : ""));
  if (run.ok() && run->exit_status == 0 && fs::exists(exported)) return exported;
  return Unavailable("cannot export '" + model + "': run from the repository with " + python +
                     " and python3-torch installed (tests/graph/export_models.py --list names the models)");
}

Result<std::string> ModelArgument(const std::string& model, const std::string& python, const fs::path& dir, int batch) {
  const auto& zoo = graph::ZooModels();
  if (std::any_of(zoo.begin(), zoo.end(), [&](const graph::ZooModel& z) { return z.name == model; })) return model;
  return ExportModel(model, python, dir, batch);
}

double LoadAverage() {
  double load[1] = {0};
  return ::getloadavg(load, 1) == 1 ? load[0] : 0.0;
}

}  // namespace edgecost::bench
