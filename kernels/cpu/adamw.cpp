// Run-time choice among the AVX-512, AVX2 and scalar AdamW.
#include <atomic>
#include <stdexcept>

#include "kernels/cpu/adamw.h"

namespace colossal::kernels::cpu {
namespace {

enum class Impl : int { kScalar, kAvx2, kAvx512 };
constexpr const char* kNames[] = {"scalar", "avx2", "avx512"};

Impl widest() {
  static const Impl best = __builtin_cpu_supports("avx512f")                                   ? Impl::kAvx512
                           : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? Impl::kAvx2
                                                                                             : Impl::kScalar;
  return best;
}

std::atomic<int> g_choice{-1};  // -1: the widest

Impl current() {
  int c = g_choice.load(std::memory_order_relaxed);
  return c < 0 ? widest() : static_cast<Impl>(c);
}

}  // namespace

void adamw_fp32(float* param, float* exp_avg, float* exp_avg_sq, const float* grad, int64_t n,
                const AdamWStep& s) {
  auto c = detail::coefficients(s);
  switch (current()) {
    case Impl::kAvx512: return detail::adamw_fp32_avx512(param, exp_avg, exp_avg_sq, grad, n, c);
    case Impl::kAvx2: return detail::adamw_fp32_avx2(param, exp_avg, exp_avg_sq, grad, n, c);
    case Impl::kScalar: return detail::adamw_fp32_scalar(param, exp_avg, exp_avg_sq, grad, n, c);
  }
}

void adamw_bf16_master(float* master, float* exp_avg, float* exp_avg_sq, const uint16_t* grad,
                       uint16_t* working, int64_t n, const AdamWStep& s) {
  auto c = detail::coefficients(s);
  switch (current()) {
    case Impl::kAvx512: return detail::adamw_bf16_avx512(master, exp_avg, exp_avg_sq, grad, working, n, c);
    case Impl::kAvx2: return detail::adamw_bf16_avx2(master, exp_avg, exp_avg_sq, grad, working, n, c);
    case Impl::kScalar: return detail::adamw_bf16_scalar(master, exp_avg, exp_avg_sq, grad, working, n, c);
  }
}

const char* adamw_implementation() { return kNames[static_cast<int>(current())]; }

std::vector<std::string> adamw_implementations() {
  std::vector<std::string> names;
  for (int i = static_cast<int>(widest()); i >= 0; --i) names.emplace_back(kNames[i]);
  return names;
}

std::string adamw_use(const std::string& name) {
  std::string previous = g_choice.load() < 0 ? "auto" : adamw_implementation();
  int choice = -1;
  for (int i = 0; i <= static_cast<int>(widest()); ++i)
    if (name == kNames[i]) choice = i;
  if (name != "auto" && choice < 0) {
    std::string known;
    for (const auto& n : adamw_implementations()) known += n + " ";
    throw std::invalid_argument("adamw_use: '" + name + "' is not one this CPU runs (" + known + "or auto)");
  }
  g_choice.store(choice);
  return previous;
}

}  // namespace colossal::kernels::cpu
