// Run-time choice between the AVX2 and scalar AdamW.
#include <atomic>

#include "kernels/cpu/adamw.h"

namespace colossal::kernels::cpu {
namespace {

bool cpu_has_avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

std::atomic<bool> g_force_scalar{false};

bool use_avx2() { return cpu_has_avx2_fma() && !g_force_scalar.load(std::memory_order_relaxed); }

}  // namespace

void adamw_fp32(float* param, float* exp_avg, float* exp_avg_sq, const float* grad, int64_t n,
                const AdamWStep& s) {
  auto c = detail::coefficients(s);
  if (use_avx2()) detail::adamw_fp32_avx2(param, exp_avg, exp_avg_sq, grad, n, c);
  else detail::adamw_fp32_scalar(param, exp_avg, exp_avg_sq, grad, n, c);
}

void adamw_bf16_master(float* master, float* exp_avg, float* exp_avg_sq, const uint16_t* grad,
                       uint16_t* working, int64_t n, const AdamWStep& s) {
  auto c = detail::coefficients(s);
  if (use_avx2()) detail::adamw_bf16_avx2(master, exp_avg, exp_avg_sq, grad, working, n, c);
  else detail::adamw_bf16_scalar(master, exp_avg, exp_avg_sq, grad, working, n, c);
}

const char* adamw_implementation() { return use_avx2() ? "avx2" : "scalar"; }

bool adamw_force_scalar(bool force) { return g_force_scalar.exchange(force); }

}  // namespace colossal::kernels::cpu
