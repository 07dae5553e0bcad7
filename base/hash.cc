#include "base/hash.h"

#include <cstdint>
#include <cstdio>

namespace edgecost {

Fnv1a& Fnv1a::Add(std::string_view bytes) {
  for (unsigned char c : bytes) {
    h_ ^= c;
    h_ *= 1099511628211ULL;
  }
  return *this;
}

std::string Fnv1a::Hex() const {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", h_);
  return hex;
}

std::string Fnv1aHex(std::string_view bytes) { return Fnv1a().Add(bytes).Hex(); }

}  // namespace edgecost
