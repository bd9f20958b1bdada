#pragma once
// Rotary position embedding in the "rotate half" layout Hugging Face LLaMA uses: for i < D/2
//   y[i]       = x[i] * cos[p][i]       - x[i + D/2] * sin[p][i]
//   y[i + D/2] = x[i + D/2] * cos[p][i + D/2] + x[i] * sin[p][i + D/2]
// with p the token's position. cos/sin are fp32 tables [positions, D], rounded to the storage
// type before use (as the composed version's .to(x.dtype()) does); the products in fp32, one
// rounding at the end. Backward is the transposed rotation (sin negated). x and y:
// [tokens, heads, D], contiguous; in place (y == x) is allowed. Tokens are `sequences` rows of
// `seq_len` that share the positions [seq_len] (a batch: no per-row copy of the positions).
#include <cstdint>

#include "kernels/cuda/common.h"

namespace colossal::kernels::cuda {

struct RopeShape {
  int64_t tokens = 0, heads = 0, head_dim = 0;  // head_dim even
  DType dtype = DType::f32;
  int64_t seq_len = 0;  // positions per sequence; tokens a multiple of it
};

void rope(const RopeShape& s, const void* x, const float* cos, const float* sin, const int64_t* positions, void* y,
          bool backward, Stream stream);

}  // namespace colossal::kernels::cuda
