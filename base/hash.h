// A content hash for naming things by what they hold (device fingerprints,
// training graphs): stable across builds and machines, not cryptographic.
#pragma once

#include <string>
#include <string_view>

namespace edgecost {

// FNV-1a, 64 bits, as 16 hex digits.
std::string Fnv1aHex(std::string_view bytes);

}  // namespace edgecost
