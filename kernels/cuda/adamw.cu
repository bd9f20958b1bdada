#include "kernels/cuda/adamw.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/index_math.h"

namespace colossal::kernels::cuda {
namespace {

using cpu::detail::AdamWCoefficients;

// The CPU scalar kernel's operations in its order: __fmul_rn/__fadd_rn keep nvcc from fusing
// what the CPU rounds twice; the one fma is the CPU's std::fma.
__device__ __forceinline__ float update(float p, float& m, float& v, float g, const AdamWCoefficients& c) {
  p = __fmul_rn(p, c.decay);
  m = __fmaf_rn(g, c.one_minus_beta1, __fmul_rn(m, c.beta1));
  v = __fadd_rn(__fmul_rn(v, c.beta2), __fmul_rn(__fmul_rn(c.one_minus_beta2, g), g));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), c.sqrt_bc2), c.eps);
  return __fadd_rn(p, __fdiv_rn(__fmul_rn(c.neg_step_size, m), denom));
}

__device__ __forceinline__ uint16_t to_bf16_bits(float f) {
  const __nv_bfloat16 b = __float2bfloat16_rn(f);
  return *reinterpret_cast<const uint16_t*>(&b);
}
__device__ __forceinline__ float from_bf16_bits(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

__global__ void adamw_kernel(const AdamWTensor* __restrict__ table, int count, int64_t total_chunks) {
  for (int64_t chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
    const AdamWTensor& t = table[index::entry_of_chunk(table, count, chunk)];
    const int64_t begin = (chunk - t.first_chunk) * kAdamWChunk;
    const int64_t end = min(begin + kAdamWChunk, t.size);
    const AdamWCoefficients c = t.c;
    if (t.grad_bf16) {
      const uint16_t* g = static_cast<const uint16_t*>(t.grad);
      for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        float m = t.exp_avg[i], v = t.exp_avg_sq[i];
        const float p = update(t.param[i], m, v, from_bf16_bits(g[i]), c);
        t.param[i] = p;
        t.exp_avg[i] = m;
        t.exp_avg_sq[i] = v;
        if (t.working) t.working[i] = to_bf16_bits(p);
      }
    } else {
      const float* g = static_cast<const float*>(t.grad);
      for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        float m = t.exp_avg[i], v = t.exp_avg_sq[i];
        const float p = update(t.param[i], m, v, g[i], c);
        t.param[i] = p;
        t.exp_avg[i] = m;
        t.exp_avg_sq[i] = v;
        if (t.working) t.working[i] = to_bf16_bits(p);
      }
    }
  }
}

}  // namespace

int64_t adamw_plan(AdamWTensor* table, int count) { return index::plan_chunks(table, count, kAdamWChunk); }

void adamw_multi_tensor(const AdamWTensor* device_table, int count, int64_t total_chunks, Stream stream) {
  if (count == 0 || total_chunks == 0) return;
  // Enough blocks to fill the GPU several times over; each walks chunks in a grid stride.
  const int64_t blocks = total_chunks < 65535 ? total_chunks : 65535;
  adamw_kernel<<<static_cast<unsigned>(blocks), 512, 0, detail::stream_of(stream)>>>(device_table, count,
                                                                                      total_chunks);
  detail::check_launch("adamw_multi_tensor");
}

}  // namespace colossal::kernels::cuda
