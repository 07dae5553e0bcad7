// Where the shared reference material is: $EDGECOST_SHARED_DIR, else ../shared.
#pragma once

#include <cstdlib>
#include <string>

namespace edgecost::testing {

inline std::string SharedDir() {
  const char* dir = std::getenv("EDGECOST_SHARED_DIR");
  return dir && *dir ? dir : "../shared";
}

inline std::string PoetInstance(const std::string& model, const std::string& platform) {
  return SharedDir() + "/reference/poet-instances/" + model + "." + platform + ".json";
}

}  // namespace edgecost::testing
