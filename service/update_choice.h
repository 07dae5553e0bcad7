// A sparse update chosen under budgets (`edgecost choose-update`), after the Tiny Training
// Engine's contribution analysis (docs/design/finetuning.md): each layer with parameters is scored
// by a short probe on the user's data, the held-out loss drop of training it alone for a few steps
// from the model's weights (or by the user's scores), and layers are added best score per byte
// first while the step's memory stays within the budget and its step within the runtime budget.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "proto/edgecost.pb.h"
#include "service/train_job.h"

namespace edgecost::service {

struct UpdateChoiceOptions {
  // The model, batch, data (with a held-out part), optimizer, lr, seed, threads and init as `train`
  // takes them; train.solve.update_in_backward counts gradients as updates in the backward pass do.
  TrainJobOptions train;
  // The budget: bytes of the step's memory (parameters, gradients, optimizer state, workspace and
  // the plain step's activations), or a share of the full update's (0 < budget_fraction <= 1).
  uint64_t budget_bytes = 0;
  double budget_fraction = 0;
  double runtime_budget_multiple = 0;  // of the full update's step time on measured costs; 0: none
  double energy_budget_multiple = 0;   // of the full update's step energy on measured costs; 0: none
  int probe_steps = 10;
  // Shares of a layer's output channels tried beside the whole layer (a sparse tensor update of a
  // convolution or linear layer: its weight gradient and optimizer state shrink to the share).
  std::vector<double> shares = {0.25, 0.5};
  std::string scores_file;  // "LAYER,SCORE" lines instead of the probe
};

// Parses --ram-budget for a choice: "25%" of the full update's memory, or bytes ("600kB").
Status ParseUpdateBudget(const std::string& text, UpdateChoiceOptions& options);

Result<v1::UpdateChoice> ChooseUpdate(const UpdateChoiceOptions& options,
                                      const std::function<void(const std::string&)>& log);

}  // namespace edgecost::service
