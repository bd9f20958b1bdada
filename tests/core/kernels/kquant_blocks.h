#pragma once
// Random K-quant blocks for the kernel tests: random bytes with fp16 scales (of either sign) written
// where each format keeps them, so every bit pattern of the values and sub-scales is exercised.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kquants.h"
#include "kernels/cpu/matvec.h"

namespace colossal::kernels::cpu::testing {

inline std::vector<uint8_t> random_kquant_blocks(WeightFormat f, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> data(static_cast<size_t>(data_bytes(f, rows, cols)));
  for (auto& b : data) b = static_cast<uint8_t>(gen());
  const int64_t bytes = kquant_block_bytes(f);
  std::vector<int64_t> offsets;
  switch (f) {
    case WeightFormat::kQ2K: offsets = {80, 82}; break;
    case WeightFormat::kQ3K: offsets = {108}; break;
    case WeightFormat::kQ6K: offsets = {208}; break;
    default: offsets = {0, 2};
  }
  std::uniform_real_distribution<float> size(-0.01f, 0.01f);
  for (size_t b = 0; b < data.size() / static_cast<size_t>(bytes); ++b)
    for (int64_t o : offsets) {
      const uint16_t h = float_to_half(size(gen));
      std::memcpy(&data[b * static_cast<size_t>(bytes) + static_cast<size_t>(o)], &h, 2);
    }
  return data;
}

// |d scale q| + |dm min| per weight of [rows, cols] K-quant blocks: the size of the two terms a
// kernel adds (the min term is subtracted, so an error bound follows the terms, not their difference).
inline torch::Tensor kquant_term_sizes(WeightFormat f, const uint8_t* data, int64_t rows, int64_t cols) {
  auto size = torch::empty({rows, cols}, torch::kDouble);
  auto a = size.accessor<double, 2>();
  SuperBlock s;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / kSuperBlock; ++b) {
      unpack_superblock(f, data + r * data_bytes(f, 1, cols) + b * kquant_block_bytes(f), s);
      for (int l = 0; l < kSuperBlock; ++l)
        a[r][b * kSuperBlock + l] =
            std::fabs(double(s.d) * s.scale[l / 16] * s.q[l]) + std::fabs(double(s.dm) * s.min[l / 16]);
    }
  return size;
}

}  // namespace colossal::kernels::cpu::testing
