// Files written so that a crash or a power cut leaves either the old file or the whole new one,
// never half of it: checkpoints, trained models, exports.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace edgecost {

// Writes `bytes` to `path` through a temporary file beside it: written, flushed to the device,
// renamed over `path`, then the directory flushed so that the rename itself survives a power cut.
Status WriteFileAtomically(const std::string& path, std::string_view bytes);

// Removes the temporaries of WriteFileAtomically(path, ...) left by processes that were killed while
// writing (their pid no longer runs); returns how many.
int RemoveStaleTemporaries(const std::string& path);

}  // namespace edgecost
