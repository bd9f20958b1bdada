#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cross_entropy.h"

namespace colossal::kernels::cuda {
namespace {

using namespace detail;

constexpr int kThreads = 512;

// Running (max, sum of exp(x - max)) merged across threads.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  if (mm == -INFINITY) return;  // both empty
  s = s * expf(m - mm) + s2 * expf(m2 - mm);
  m = mm;
}

template <typename T>
__global__ void rows_kernel(T* __restrict__ logits, int64_t vocab, int64_t stride, const int64_t* __restrict__ target,
                            int64_t ignore_index, float* __restrict__ loss, bool write_gradient,
                            const float* __restrict__ gradient_scale) {
  __shared__ float sm[32], ss[32];
  const int64_t row = blockIdx.x;
  T* x = logits + row * stride;
  float m = -INFINITY, s = 0.0f;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = to_float(x[i]);
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  for (int o = 16; o > 0; o >>= 1) merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  if (lane == 0) {
    sm[warp] = m;
    ss[warp] = s;
  }
  __syncthreads();
  m = lane < warps ? sm[lane] : -INFINITY;
  s = lane < warps ? ss[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  const float lse = m + logf(s);
  const int64_t t = target[row];
  const bool counted = t != ignore_index;
  if (threadIdx.x == 0) loss[row] = counted ? lse - to_float(x[t]) : 0.0f;
  if (!write_gradient) return;
  __syncthreads();  // x[t] is read above before anyone overwrites it
  const float scale = counted ? *gradient_scale : 0.0f;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float p = expf(to_float(x[i]) - lse);
    x[i] = from_float<T>(scale * (i == t ? p - 1.0f : p));
  }
}

}  // namespace

void cross_entropy_rows(void* logits, const CrossEntropyRows& a, Stream stream) {
  require(a.vocab > 0 && a.row_stride >= a.vocab, "cross_entropy_rows", "expected vocab > 0 and row_stride >= vocab");
  require(!a.write_gradient || a.gradient_scale, "cross_entropy_rows", "a gradient needs gradient_scale");
  if (a.rows == 0) return;
  dispatch(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    // Rows are independent blocks: at most 2^31 - 1 of them, far above a chunk of rows.
    rows_kernel<T><<<static_cast<unsigned>(a.rows), kThreads, 0, stream_of(stream)>>>(
        static_cast<T*>(logits), a.vocab, a.row_stride, a.target, a.ignore_index, a.loss, a.write_gradient,
        a.gradient_scale);
  });
  check_launch("cross_entropy_rows");
}

}  // namespace colossal::kernels::cuda
