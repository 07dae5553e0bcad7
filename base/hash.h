// A content hash for naming things by what they hold (device fingerprints,
// training graphs): stable across builds and machines, not cryptographic.
#pragma once

#include <string>
#include <string_view>

namespace edgecost {

// FNV-1a, 64 bits, as 16 hex digits.
std::string Fnv1aHex(std::string_view bytes);

// The same over bytes that come in parts: Fnv1aHex(a + b) == Fnv1a().Add(a).Add(b).Hex().
class Fnv1a {
 public:
  Fnv1a& Add(std::string_view bytes);
  std::string Hex() const;

 private:
  unsigned long long h_ = 1469598103934665603ULL;
};

}  // namespace edgecost
