#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rms_norm.h"

namespace colossal::kernels::cuda {
namespace {

using namespace detail;

constexpr int kThreads = 256;
constexpr int kBackwardBlocks = 256;  // partial weight gradients: at most this many rows of dim floats

template <typename T>
__global__ void forward_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                               float* __restrict__ rstd, int64_t dim, float eps) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * dim;
  T* yr = y + row * dim;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = to_float(xr[i]);
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float r = rsqrtf(ss / static_cast<float>(dim) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float t = round_to<T>(to_float(xr[i]) * r);
    yr[i] = from_float<T>(to_float(w[i]) * t);
  }
}

// d/dx of w * x * r with r = (mean(x^2) + eps)^-1/2:  gx = r * (gy*w - x * r^2 * mean(gy*w*x))
// Each block takes rows blockIdx.x, + gridDim.x, ... and sums gy * t per column: in shared memory
// when a row of floats fits there (kShared), else in its own row of `partial`.
template <typename T, bool kShared>
__global__ void backward_kernel(const T* __restrict__ gy, const T* __restrict__ x, const T* __restrict__ w,
                                const float* __restrict__ rstd, T* __restrict__ gx, float* __restrict__ partial,
                                int64_t rows, int64_t dim) {
  extern __shared__ float shared_gw[];  // dim floats (kShared)
  __shared__ float scratch[32];
  float* gw = kShared ? shared_gw : partial + blockIdx.x * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) gw[i] = 0.0f;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* g = gy + row * dim;
    const T* xr = x + row * dim;
    const float r = rstd[row];
    float dot = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) dot += to_float(g[i]) * to_float(w[i]) * to_float(xr[i]);
    dot = block_sum(dot, scratch);
    const float k = r * r * dot / static_cast<float>(dim);
    T* out = gx + row * dim;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      const float xv = to_float(xr[i]), gv = to_float(g[i]);
      out[i] = from_float<T>(r * (gv * to_float(w[i]) - xv * k));
      gw[i] += gv * round_to<T>(xv * r);  // each thread owns its columns: no race
    }
  }
  if (kShared)
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) partial[blockIdx.x * dim + i] = gw[i];
}

template <typename T>
__global__ void reduce_columns_kernel(const float* __restrict__ partial, int64_t parts, int64_t dim, T* __restrict__ out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= dim) return;
  float s = 0.0f;
  for (int64_t p = 0; p < parts; ++p) s += partial[p * dim + i];
  out[i] = from_float<T>(s);
}

int64_t backward_blocks(const RmsNormShape& s) { return s.rows < kBackwardBlocks ? s.rows : kBackwardBlocks; }

void check_shape(const RmsNormShape& s, const char* kernel) {
  require(s.rows >= 0 && s.dim > 0, kernel, "expected rows >= 0 and dim > 0");
}

}  // namespace

void rms_norm_forward(const RmsNormShape& s, const void* x, const void* weight, float eps, void* y, float* rstd,
                      Stream stream) {
  check_shape(s, "rms_norm_forward");
  if (s.rows == 0) return;
  dispatch(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<T><<<static_cast<unsigned>(s.rows), kThreads, 0, stream_of(stream)>>>(
        static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<T*>(y), rstd, s.dim, eps);
  });
  check_launch("rms_norm_forward");
}

int64_t rms_norm_backward_workspace(const RmsNormShape& s) { return backward_blocks(s) * s.dim; }

void rms_norm_backward(const RmsNormShape& s, const void* grad_y, const void* x, const void* weight,
                       const float* rstd, void* grad_x, void* grad_weight, float* workspace, Stream stream) {
  check_shape(s, "rms_norm_backward");
  const int64_t blocks = backward_blocks(s);
  const size_t shared = static_cast<size_t>(s.dim) * sizeof(float);
  const bool in_shared = shared <= 48 * 1024;  // without opting in to more
  dispatch(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (blocks > 0) {
      auto kernel = in_shared ? backward_kernel<T, true> : backward_kernel<T, false>;
      kernel<<<static_cast<unsigned>(blocks), kThreads, in_shared ? shared : 0, stream_of(stream)>>>(
          static_cast<const T*>(grad_y), static_cast<const T*>(x), static_cast<const T*>(weight), rstd,
          static_cast<T*>(grad_x), workspace, s.rows, s.dim);
      check_launch("rms_norm_backward");
    }
    reduce_columns_kernel<T><<<static_cast<unsigned>((s.dim + 255) / 256), 256, 0, stream_of(stream)>>>(
        workspace, blocks, s.dim, static_cast<T*>(grad_weight));
  });
  check_launch("rms_norm_backward (weight gradient)");
}

}  // namespace colossal::kernels::cuda
