// Drives the libFuzzer target without libFuzzer (GCC has none): a fixed number
// of seeded mutations of valid requests, so the ordinary test run exercises the
// decoding paths; scripts/fuzz runs the same target coverage-guided with clang.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

TEST(Fuzz, MutatedRequestsGetAnswersNotCrashes) {
  const std::vector<std::string> seeds = {
      std::string(1, '\x00') + R"({"model":"linear","device":"a72"})",
      std::string(1, '\x00') + R"({"model":"resnet18_cifar","device":"m4","batchSize":4,"trainable":"last:2"})",
      std::string(1, '\x01') + R"({"name":"this"})",
      std::string(1, '\x04') + R"({"id":"18446744073709551615"})",
      std::string(1, '\x80') + std::string("\x0a\x06linear\x12\x03" "a72", 13),
      std::string(1, '\x82') + std::string("\x0a\x03\xff\xfe\xfd", 5),
  };
  std::mt19937 random(12345);
  for (int i = 0; i < 20000; ++i) {
    std::string input = seeds[random() % seeds.size()];
    const int edits = 1 + static_cast<int>(random() % 4);
    for (int e = 0; e < edits && !input.empty(); ++e) {
      const size_t at = random() % input.size();
      switch (random() % 4) {
        case 0: input[at] = static_cast<char>(random()); break;             // flip a byte
        case 1: input.erase(at, 1 + random() % 8); break;                  // cut
        case 2: input.insert(at, 1 + random() % 8, static_cast<char>(random())); break;  // insert
        case 3: input.resize(at + 1); break;                               // truncate
      }
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  SUCCEED() << "20000 mutated requests answered";
}

}  // namespace
