// The device fingerprint: what, if it changed, would change measured costs.
// Read through root paths so tests can point them at fake trees.
#pragma once

#include <string>

#include "base/status.h"
#include "proto/edgecost.pb.h"

namespace edgecost::profiler {

struct SystemRoots {
  std::string sys = "/sys";  // or $EDGECOST_SYSFS_ROOT
  std::string proc = "/proc";

  // /sys from $EDGECOST_SYSFS_ROOT when set.
  static SystemRoots FromEnvironment();
};

// Reads the fingerprint; `dnnl_isa` comes from the kernel backend, `paging_dir`
// names the folder whose block device holds paged tensors.
v1::Fingerprint ReadFingerprint(const SystemRoots& roots, const std::string& dnnl_isa, const std::string& paging_dir);

// A stable hex digest of every field but `hash`.
std::string FingerprintHash(const v1::Fingerprint& fingerprint);

}  // namespace edgecost::profiler
