#include <iostream>

#include "cli/cli.h"
#include "profiler/bench.h"

namespace edgecost::cli {

void RegisterBenchCommand(CLI::App& app, Context& ctx) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks that print figures (speed, agreement, overhead)");
  bench->require_subcommand(1);

  auto profiler_options = std::make_shared<profiler::ProfilerBenchOptions>();
  CLI::App* prof = bench->add_subcommand("profiler", "Profiling time for resnet18_cifar and resnet18, run-to-run "
                                                     "agreement, measurement overhead");
  prof->add_option("--threads", profiler_options->threads, "oneDNN threads (default: all cores)");
  prof->callback([profiler_options, &ctx] {
    const Status status = profiler::RunProfilerBenchmark(std::cout, *profiler_options);
    ctx.exit_code = status.ok() ? kExitOk : Failure(status);
  });
}

}  // namespace edgecost::cli
