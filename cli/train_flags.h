// The flags `train` and `choose-update` share (cmd_train.cc), and the one request a train job is.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "proto/edgecost.pb.h"

namespace edgecost::cli {

struct TrainFlags {
  std::string model;
  int batch_size = 1;
  std::string trainable = "all";
  bool update_in_backward = false;
  std::string schedule_file;
  uint64_t schedule_id = 0;
  std::string ram_budget;               // the training process's peak RSS
  std::string activation_budget;        // the activations' alone
  std::string runtime_budget = "1.5x";  // solver::kDefaultRuntimeBudgetMultiple, as `solve`
  std::string strategy = "optimal";
  std::string cost_source = "auto";
  bool count_paging_time = true;  // measured: the I/O thread cannot hide paging behind compute (README)
  double time_limit_s = 60;
  int steps = 10;
  double lr = 0.01;
  // The optimizer and the learning-rate schedule, as torch.optim names them; unset: PyTorch's defaults.
  std::string optimizer = "sgd";
  double momentum = 0, dampening = 0;
  bool nesterov = false;
  std::optional<double> weight_decay, eps, lr_gamma;
  std::string betas;  // "B1,B2"
  std::string lr_schedule = "none";
  uint32_t lr_step_size = 0, lr_t_max = 0, warmup_steps = 0;
  double lr_min = 0;
  int threads = 0;
  uint32_t seed = 1;
  std::string data_file;
  int epochs = 0;
  std::string mean, std_dev;  // comma-separated per channel
  std::string data_keys = "x,y";
  double val_split = 0;
  std::string val_data;
  std::string init = "file";
  std::string out_onnx;
  std::string out_npz;
  std::string checkpoint_path;
  int checkpoint_every = 100;
  bool resume = false;
  bool verify = false;
  std::string trace_path;
  std::string svg_path;  // loss and step time over the steps
  std::string paging_dir;
  bool no_store = false;
  bool no_store_schedule = false;  // a profile's paging steps: their schedule is not the user's
  bool json = false;
  std::string probes_config;
  bool accept_noisy = false;
};

// The model, how it trains and its data: the flags both commands take.
void AddTrainingFlags(CLI::App* cmd, const std::shared_ptr<TrainFlags>& flags);

// "0.485,0.456,0.406": numbers separated by commas, for `flag`.
Result<std::vector<float>> ParseFloatList(const std::string& text, const std::string& flag);

// The flags as the one request a train job is (v1::StartTrainRequest), locally or on an agent:
// service::TrainJobOptionsOf maps it to options with one set of defaults.
Result<v1::StartTrainRequest> TrainRequestOf(const TrainFlags& flags);

}  // namespace edgecost::cli
