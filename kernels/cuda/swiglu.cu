#include "kernels/cuda/common.cuh"
#include "kernels/cuda/swiglu.h"

namespace colossal::kernels::cuda {
namespace {

using namespace detail;

__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

template <typename T>
__global__ void forward_kernel(const T* __restrict__ gate, const T* __restrict__ up, T* __restrict__ y, int64_t n,
                               int64_t width, int64_t gate_stride, int64_t up_stride) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / width, c = idx % width;
    const float g = to_float(gate[r * gate_stride + c]);
    y[idx] = from_float<T>(g * sigmoid(g) * to_float(up[r * up_stride + c]));
  }
}

template <typename T>
__global__ void backward_kernel(const T* __restrict__ gy, const T* __restrict__ gate, const T* __restrict__ up,
                                T* __restrict__ d_gate, T* __restrict__ d_up, int64_t n, int64_t width,
                                int64_t gate_stride, int64_t up_stride) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / width, c = idx % width;
    const float g = to_float(gate[r * gate_stride + c]), u = to_float(up[r * up_stride + c]);
    const float dy = to_float(gy[idx]), sg = sigmoid(g);
    d_gate[idx] = from_float<T>(dy * u * sg * (1.0f + g * (1.0f - sg)));
    d_up[idx] = from_float<T>(dy * g * sg);
  }
}

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 65536 * 8 ? blocks : 65536 * 8);
}

void check(const SwigluShape& s, const char* kernel) {
  require(s.rows >= 0 && s.width >= 0 && s.gate_stride >= s.width && s.up_stride >= s.width, kernel,
          "expected row strides of at least the width " + std::to_string(s.width));
}

}  // namespace

void swiglu_forward(const SwigluShape& s, const void* gate, const void* up, void* y, Stream stream) {
  check(s, "swiglu_forward");
  const int64_t n = s.rows * s.width;
  if (n == 0) return;
  dispatch(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<T><<<grid_for(n), 256, 0, stream_of(stream)>>>(static_cast<const T*>(gate), static_cast<const T*>(up),
                                                                 static_cast<T*>(y), n, s.width, s.gate_stride,
                                                                 s.up_stride);
  });
  check_launch("swiglu_forward");
}

void swiglu_backward(const SwigluShape& s, const void* grad_y, const void* gate, const void* up, void* grad_gate,
                     void* grad_up, Stream stream) {
  check(s, "swiglu_backward");
  const int64_t n = s.rows * s.width;
  if (n == 0) return;
  dispatch(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    backward_kernel<T><<<grid_for(n), 256, 0, stream_of(stream)>>>(
        static_cast<const T*>(grad_y), static_cast<const T*>(gate), static_cast<const T*>(up),
        static_cast<T*>(grad_gate), static_cast<T*>(grad_up), n, s.width, s.gate_stride, s.up_stride);
  });
  check_launch("swiglu_backward");
}

}  // namespace colossal::kernels::cuda
