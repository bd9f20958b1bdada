#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rope.h"

namespace colossal::kernels::cuda {
namespace {

using namespace detail;

// One thread per pair (i, i + D/2) of one head of one token.
template <typename T>
__global__ void rope_kernel(const T* __restrict__ x, const float* __restrict__ cos, const float* __restrict__ sin,
                            const int64_t* __restrict__ positions, T* y, int64_t pairs, int64_t heads,
                            int64_t head_dim, int64_t seq_len, bool backward) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= pairs) return;
  const int64_t half = head_dim / 2;
  const int64_t i = idx % half;
  const int64_t token = idx / half / heads;
  const int64_t base = (idx / half) * head_dim;  // this token's head
  const int64_t position = positions[token % seq_len];
  const float* c = cos + position * head_dim;
  const float* s = sin + position * head_dim;
  const float a = to_float(x[base + i]), b = to_float(x[base + i + half]);
  const float c0 = round_to<T>(c[i]), c1 = round_to<T>(c[i + half]);
  // Backward: the rotation's transpose (its sines negated and swapped between the halves).
  const float sa = round_to<T>(s[i]), sb = round_to<T>(s[i + half]);
  const float s0 = backward ? -sb : sa, s1 = backward ? -sa : sb;
  y[base + i] = from_float<T>(a * c0 - b * s0);
  y[base + i + half] = from_float<T>(b * c1 + a * s1);
}

}  // namespace

void rope(const RopeShape& s, const void* x, const float* cos, const float* sin, const int64_t* positions, void* y,
          bool backward, Stream stream) {
  require(s.head_dim > 0 && s.head_dim % 2 == 0, "rope", "head_dim must be even, got " + std::to_string(s.head_dim));
  require(s.seq_len > 0 ? s.tokens % s.seq_len == 0 : s.tokens == 0, "rope",
          "tokens " + std::to_string(s.tokens) + " are not whole sequences of " + std::to_string(s.seq_len));
  const int64_t pairs = s.tokens * s.heads * (s.head_dim / 2);
  if (pairs == 0) return;
  dispatch(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<static_cast<unsigned>((pairs + 255) / 256), 256, 0, stream_of(stream)>>>(
        static_cast<const T*>(x), cos, sin, positions, static_cast<T*>(y), pairs, s.heads, s.head_dim, s.seq_len,
        backward);
  });
  check_launch("rope");
}

}  // namespace colossal::kernels::cuda
