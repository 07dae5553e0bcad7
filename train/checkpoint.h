// Checkpoints of a training run (v1::TrainCheckpoint): the executor's whole changing state after a
// step, written atomically, so that a run killed at any moment resumes from its last checkpoint
// and ends at the weights of a run that was never stopped, bit for bit.
#pragma once

#include <string>

#include "base/status.h"
#include "proto/edgecost.pb.h"
#include "train/executor.h"

namespace edgecost::train {

// Every layer's parameters (trained or frozen), batch-norm running statistics and batch counts,
// the optimizer's state, and the steps completed, into `checkpoint` (its tensors and steps_done).
void CaptureState(Executor& executor, v1::TrainCheckpoint& checkpoint);

// The reverse, into an executor built on the same graph with the same optimizer: InvalidArgument
// naming the tensor when one is missing, extra, or of another size.
Status RestoreState(const v1::TrainCheckpoint& checkpoint, Executor& executor);

Status WriteCheckpoint(const std::string& path, const v1::TrainCheckpoint& checkpoint);
// InvalidArgument when the bytes are not a checkpoint of this format, DataLoss when its checksum
// does not match (cut short or altered); `what` names the file in errors.
Result<v1::TrainCheckpoint> ParseCheckpoint(const std::string& bytes, const std::string& what);
// The file's checkpoint: NotFound when there is no file, else as ParseCheckpoint.
Result<v1::TrainCheckpoint> ReadCheckpoint(const std::string& path);

}  // namespace edgecost::train
