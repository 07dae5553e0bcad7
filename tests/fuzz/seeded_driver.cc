// Runs a fuzz target without libFuzzer (GCC has none): every seed and
// regression input in the given folders as it is, then a fixed number of
// seeded random mutations of them, so the ordinary test run replays every
// input that once crashed and exercises the target's paths. scripts/fuzz runs
// the same targets coverage-guided with clang's libFuzzer.
//
// Usage: DRIVER MUTATIONS FOLDER...
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int Run(const std::string& input) {
  return LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MUTATIONS FOLDER...\n", argv[0]);
    return 2;
  }
  const long mutations = std::strtol(argv[1], nullptr, 10);
  std::vector<std::string> inputs;
  for (int i = 2; i < argc; ++i) {
    for (const auto& entry : std::filesystem::directory_iterator(argv[i])) {
      if (!entry.is_regular_file()) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      std::stringstream bytes;
      bytes << in.rdbuf();
      inputs.push_back(bytes.str());
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "no inputs in the given folders\n");
    return 1;
  }
  for (const std::string& input : inputs) Run(input);
  std::mt19937 random(12345);
  for (long i = 0; i < mutations; ++i) {
    std::string input = inputs[random() % inputs.size()];
    const int edits = 1 + static_cast<int>(random() % 4);
    for (int e = 0; e < edits && input.size() > 1; ++e) {
      const size_t at = 1 + random() % (input.size() - 1);  // byte 0 chooses the route or kind: kept
      switch (random() % 4) {
        case 0:
          input[at] = static_cast<char>(random());
          break;  // flip a byte
        case 1:
          input.erase(at, 1 + random() % 8);
          break;  // cut
        case 2:
          input.insert(at, 1 + random() % 8, static_cast<char>(random()));
          break;  // insert
        case 3:
          input.resize(at + 1);
          break;  // truncate
      }
    }
    Run(input);
  }
  std::printf("%zu inputs and %ld mutations run\n", inputs.size(), mutations);
  return 0;
}
