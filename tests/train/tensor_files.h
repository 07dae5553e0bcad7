// Tensors to and from the PyTorch helpers of the training tests (torch_gradients.py, torch_optim.py):
// each a little-endian uint32 element count, then that many float32 values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

namespace edgecost::testing {

inline void WriteTensors(const std::filesystem::path& path, const std::vector<std::vector<float>>& tensors) {
  std::ofstream out(path, std::ios::binary);
  for (const std::vector<float>& t : tensors) {
    const auto count = static_cast<uint32_t>(t.size());
    out.write(reinterpret_cast<const char*>(&count), sizeof(count));
    out.write(reinterpret_cast<const char*>(t.data()), static_cast<std::streamsize>(t.size() * sizeof(float)));
  }
}

inline std::vector<std::vector<float>> ReadTensors(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::vector<float>> tensors;
  uint32_t count = 0;
  while (in.read(reinterpret_cast<char*>(&count), sizeof(count))) {
    std::vector<float>& t = tensors.emplace_back(count);
    in.read(reinterpret_cast<char*>(t.data()), static_cast<std::streamsize>(count * sizeof(float)));
  }
  return tensors;
}

}  // namespace edgecost::testing
