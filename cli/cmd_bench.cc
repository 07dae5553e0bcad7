#include <iostream>

#include "bench/daemon_bench.h"
#include "bench/predict_bench.h"
#include "bench/probes_bench.h"
#include "bench/profiler_bench.h"
#include "bench/solver_bench.h"
#include "bench/train_bench.h"
#include "cli/cli.h"

namespace edgecost::cli {

void RegisterBenchCommand(CLI::App& app, Context& ctx) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks that print figures (speed, agreement, overhead)");
  bench->require_subcommand(1);
  bench->footer(
      "Figures, not assertions: run them on a quiet machine and compare runs side by side.\n"
      "Examples:\n"
      "  edgecost bench profiler --threads 1\n"
      "  edgecost bench solver --time-scale 0.1\n"
      "  edgecost bench probes\n"
      "  edgecost bench daemon --protobuf");

  auto profiler_options = std::make_shared<profiler::ProfilerBenchOptions>();
  CLI::App* prof = bench->add_subcommand("profiler",
                                         "Profiling time for resnet18_cifar and resnet18, run-to-run "
                                         "agreement, measurement overhead");
  prof->add_option("--threads", profiler_options->threads, "oneDNN threads (default: all cores)");
  auto section = std::make_shared<std::string>("all");
  prof->add_option("--section", *section,
                   "all; speed (profiling time, agreement, overhead); busy (quiet against one core kept busy by "
                   "a spinning process)")
      ->capture_default_str()
      ->check(CLI::IsMember({"all", "speed", "busy"}));
  prof->footer("Examples:\n  edgecost bench profiler\n  edgecost bench profiler --section busy --threads 2");
  prof->callback([profiler_options, section, &ctx] {
    profiler_options->speed = *section != "busy";
    profiler_options->busy = *section != "speed";
    const Status status = profiler::RunProfilerBenchmark(std::cout, *profiler_options);
    ctx.exit_code = status.ok() ? kExitOk : Failure(status);
  });

  CLI::App* probes = bench->add_subcommand("probes", "Cost of a probe read and CPU of a 1 kHz sampling thread");
  probes->callback([&ctx] {
    const Status status = probes::RunProbesBenchmark(std::cout);
    ctx.exit_code = status.ok() ? kExitOk : Failure(status);
  });

  auto daemon_options = std::make_shared<daemon::DaemonBenchOptions>();
  CLI::App* serve = bench->add_subcommand("daemon",
                                          "GetCostTable throughput and p50/p99 latency at 1, 16 and 256 "
                                          "connections over loopback, a preset against a measured table at 64, "
                                          "and ListModels and GET / with a large stored model");
  serve->add_option("--seconds", daemon_options->seconds_per_level, "Seconds per concurrency level")
      ->capture_default_str()
      ->check(CLI::Range(0.5, 60.0));
  serve->add_option("--worker-threads", daemon_options->worker_threads, "Daemon worker threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  serve->add_flag("--protobuf", daemon_options->protobuf, "Binary protobuf bodies instead of JSON");
  serve->add_option("--chain-nodes", daemon_options->chain_nodes, "Nodes of the stored ONNX chain listed")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  serve->callback([daemon_options, &ctx] {
    const Status status = daemon::RunDaemonBenchmark(std::cout, *daemon_options);
    ctx.exit_code = status.ok() ? kExitOk : Failure(status);
  });

  auto train_options = std::make_shared<service::TrainBenchOptions>();
  CLI::App* train =
      bench->add_subcommand("train",
                            "resnet18_cifar trained for real under three schedules: peak bytes against "
                            "the plan, step time against the predictions, against PyTorch; with "
                            "--vs-pytorch, edgecost against PyTorch + OpenBLAS per model, on the roofline");
  train
      ->add_option("--threads", train_options->threads,
                   "oneDNN and PyTorch threads (0: all cores); --vs-pytorch measures each of a list, the schedules "
                   "the first")
      ->delimiter(',')
      ->capture_default_str();
  CLI::Option* batch_sizes =
      train
          ->add_option("--batch-size", train_options->batch_sizes,
                       "Batch size; --vs-pytorch measures each of a list (default 2,8,32), the schedules the first")
          ->delimiter(',')
          ->capture_default_str()
          ->check(CLI::PositiveNumber);
  CLI::Option* steps = train->add_option("--steps", train_options->steps, "Steps per schedule (--vs-pytorch: 15)")
                           ->capture_default_str()
                           ->check(CLI::Range(2, 100000));
  train->add_option("--python", train_options->python, "Python with PyTorch")->capture_default_str();
  train->add_flag("--vs-pytorch", train_options->vs_pytorch,
                  "edgecost's plain step against PyTorch's on OpenBLAS, per model, with FLOPs, bytes and roofline "
                  "share (run from the repository: it exports the models with tests/graph/export_models.py)");
  train->add_option("--models", train_options->models, "--vs-pytorch: models tests/graph/export_models.py exports")
      ->delimiter(',')
      ->capture_default_str();
  train->footer(
      "Examples:\n  edgecost bench train\n  edgecost bench train --vs-pytorch\n"
      "  edgecost bench train --vs-pytorch --threads 1,0 --batch-size 2,8 --models resnet18_tv,mobilenet_v2");
  train->callback([train_options, steps, batch_sizes, &ctx] {
    if (train_options->vs_pytorch && steps->count() == 0) train_options->steps = 15;
    if (train_options->vs_pytorch && batch_sizes->count() == 0) train_options->batch_sizes = {2, 8, 32};
    const Status status = service::RunTrainBenchmark(std::cout, *train_options);
    ctx.exit_code = status.ok() ? kExitOk : Failure(status);
  });

  auto predict_options = std::make_shared<service::PredictBenchOptions>();
  CLI::App* predict = bench->add_subcommand(
      "predict",
      "Predicted against measured on the default path (fresh database, one plain profile, the first and second "
      "train of each schedule, each a process of its own): step time, peak RSS, energy, quiet and busy");
  predict->add_option("--models", predict_options->models,
                      "Zoo models, ONNX files, or models tests/graph/export_models.py exports; NAME@BATCH sets the "
                      "batch, NAME:OPTIMIZER the optimizer")
      ->delimiter(',')
      ->capture_default_str();
  predict->add_option("--threads", predict_options->threads, "Thread counts (0: all cores)")
      ->delimiter(',')
      ->capture_default_str();
  predict->add_option("--loads", predict_options->loads, "quiet, and busy: one core kept busy by a spinning thread")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"quiet", "busy"}));
  predict->add_option("--steps", predict_options->steps, "Steps per training run")
      ->capture_default_str()
      ->check(CLI::Range(2, 100000));
  predict->add_option("--python", predict_options->python, "Python with PyTorch, for the exports")
      ->capture_default_str();
  predict->footer(
      "Run from the repository (the exports and examples/ are found from there). Examples:\n"
      "  edgecost bench predict\n"
      "  edgecost bench predict --models resnet18_cifar@2 --threads 1 --loads quiet --steps 20");
  predict->callback([predict_options, &ctx] {
    const Status status = service::RunPredictBenchmark(std::cout, *predict_options);
    ctx.exit_code = status.ok() ? kExitOk : Failure(status);
  });

  auto solver_options = std::make_shared<solver::SolverBenchOptions>();
  CLI::App* solve = bench->add_subcommand("solver",
                                          "The solver's targets on POET's instances: status, energy, bound, "
                                          "gap, time to first schedule and to proof, target met, next to "
                                          "POET's formulation (about 95 minutes at full time limits; "
                                          "--time-scale 0.05 for a look)");
  solve->add_option("--time-scale", solver_options->time_scale, "Multiply every time limit (0.1: a quick look)")
      ->check(CLI::PositiveNumber);
  solve->add_option("--poet-time-limit-s", solver_options->poet_time_limit_s,
                    "Time limit of POET's formulation per instance, before scaling");
  solve->add_option("--solver-threads", solver_options->threads, "The MILP solver's (CBC's) threads")->check(CLI::PositiveNumber);
  solve->add_option("--only", solver_options->only, "Only the instances of models whose name contains this");
  solve->callback([solver_options, &ctx] {
    solver_options->progress = &std::cerr;  // a line every few seconds while an instance is solved
    const Status status = solver::RunSolverBenchmark(std::cout, *solver_options);
    ctx.exit_code = status.ok() ? kExitOk : Failure(status);
  });
}

}  // namespace edgecost::cli
