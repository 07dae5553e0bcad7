// Where the tests' data is: tests/data, relative to the source root the tests run in.
#pragma once

#include <string>

namespace edgecost::testing {

// POET's exported instance of a zoo model on a board preset (tests/data/poet-instances/README.md).
inline std::string PoetInstance(const std::string& model, const std::string& platform) {
  return "tests/data/poet-instances/" + model + "." + platform + ".json";
}

}  // namespace edgecost::testing
