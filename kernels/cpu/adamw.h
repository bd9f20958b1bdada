#pragma once
// Fused AdamW update for CPU (no LibTorch dependency). One call updates a contiguous range:
//   param  = param * (1 - lr * weight_decay)
//   m      = beta1 * m + (1 - beta1) * g
//   v      = beta2 * v + (1 - beta2) * g^2
//   param -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// the same arithmetic as torch::optim::AdamW. The caller splits large tensors across threads.
// The widest implementation the CPU has is chosen at run time: AVX-512, AVX2+FMA, else scalar.
// All three give the same bits (tests run each one the CPU can).
#include <cstdint>
#include <string>
#include <vector>

namespace colossal::kernels::cpu {

// Hyper-parameters in double, as torch keeps them; the per-step coefficients are derived in
// double and rounded once to float, the way torch's scalar arguments are.
struct AdamWStep {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  int64_t step = 1;  // 1-based, after incrementing
};

/// fp32 parameters, gradients and moments.
void adamw_fp32(float* param, float* exp_avg, float* exp_avg_sq, const float* grad, int64_t n,
                const AdamWStep& s);

/// bf16 working parameters and gradients (raw uint16 bit patterns), fp32 master parameters and
/// moments: the master is updated and the working copy rewritten from it (round to nearest even).
void adamw_bf16_master(float* master, float* exp_avg, float* exp_avg_sq, const uint16_t* grad,
                       uint16_t* working, int64_t n, const AdamWStep& s);

/// "avx512", "avx2" or "scalar": the implementation the calls above use now.
const char* adamw_implementation();
/// The implementations this CPU can run, widest first.
std::vector<std::string> adamw_implementations();
/// Makes the calls above use `name` (one of adamw_implementations(), or "auto" for the widest);
/// returns the previous choice. For tests and benchmarks that compare implementations.
std::string adamw_use(const std::string& name);

namespace detail {
struct AdamWCoefficients {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, sqrt_bc2, eps;
};
AdamWCoefficients coefficients(const AdamWStep& s);
void adamw_fp32_scalar(float*, float*, float*, const float*, int64_t, const AdamWCoefficients&);
void adamw_bf16_scalar(float*, float*, float*, const uint16_t*, uint16_t*, int64_t,
                       const AdamWCoefficients&);
void adamw_fp32_avx2(float*, float*, float*, const float*, int64_t, const AdamWCoefficients&);
void adamw_bf16_avx2(float*, float*, float*, const uint16_t*, uint16_t*, int64_t,
                     const AdamWCoefficients&);
void adamw_fp32_avx512(float*, float*, float*, const float*, int64_t, const AdamWCoefficients&);
void adamw_bf16_avx512(float*, float*, float*, const uint16_t*, uint16_t*, int64_t, const AdamWCoefficients&);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);
}  // namespace detail

}  // namespace colossal::kernels::cpu
