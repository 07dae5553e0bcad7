// NumPy's .npy format and the zip archives .npz files are, read without NumPy: a
// user's arrays of inputs and labels (train --data x.npy, --data set.npz). The
// files are untrusted: every length and offset is checked against the bytes
// there are, and a file that breaks the format is an InvalidArgument naming it
// and what is wrong, never a crash or an allocation the file's size cannot back.
//
// Read: .npy versions 1.0, 2.0 and 3.0; little-endian (or byte-sized) float32,
// float64, uint8, int32 and int64 in C order. Zip archives through libzip:
// entries stored or deflated, ZIP64 too (as numpy's savez writes them), each
// entry's local header checked against the directory and its CRC-32 checked.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace edgecost::train {

struct NumpyArray {
  std::vector<int64_t> shape;
  char kind = 'f';     // 'f' float, 'u' unsigned, 'i' signed
  int item_bytes = 4;  // 1, 4 or 8
  std::string data;    // count() * item_bytes bytes, little-endian, C order
  int64_t count() const;
  double At(int64_t i) const;     // element i, converted
  std::string DtypeName() const;  // "float32", "uint8", ...
};

// `what` names the file (or archive member) in errors.
Result<NumpyArray> ParseNpy(std::string_view bytes, const std::string& what);

// The members of a zip archive, by name: those named in `only` decompressed (every one when it is
// empty), the others listed with no content. Members larger than `max_member_bytes`, members that
// asked for together unpack to more than twice that, and entries whose local headers disagree with
// the directory (one deflated member named many times: a zip bomb) are refused before anything is
// inflated.
Result<std::map<std::string, std::string>> ReadZip(std::string_view bytes, const std::string& what,
                                                   uint64_t max_member_bytes = uint64_t{1} << 31,
                                                   const std::set<std::string>& only = {});

// A zip archive of (name, content) members in this order, stored uncompressed, with fixed times so
// that the same members give the same bytes: an .npz when the members are .npy files.
Result<std::string> WriteZip(const std::vector<std::pair<std::string, std::string>>& members);

}  // namespace edgecost::train
