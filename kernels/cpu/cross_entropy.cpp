// Run-time choice between the AVX-512, AVX2 and scalar row kernels, and the bf16 wrapper.
#include "kernels/cpu/cross_entropy.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/adamw.h"  // detail::bf16_to_float, float_to_bf16

namespace colossal::kernels::cpu {
namespace {

bool xent_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

std::atomic<int> g_xent_choice{-1};  // -1 auto, 0 scalar, 1 avx512, 2 avx2

bool use_avx512() {
  int c = g_xent_choice.load(std::memory_order_relaxed);
  return c < 0 ? xent_has_avx512() : c == 1;
}

bool use_avx2() {
  int c = g_xent_choice.load(std::memory_order_relaxed);
  return c < 0 ? !xent_has_avx512() && detail::cross_entropy_avx2_supported() : c == 2;
}

void xent_row(float* x, int64_t v, int64_t target, bool grad, float scale, float* loss) {
  if (use_avx512()) detail::cross_entropy_row_avx512(x, v, target, grad, scale, loss);
  else if (use_avx2()) detail::cross_entropy_row_avx2(x, v, target, grad, scale, loss);
  else detail::cross_entropy_row_scalar(x, v, target, grad, scale, loss);
}

}  // namespace

namespace detail {

void cross_entropy_row_scalar(float* x, int64_t v, int64_t target, bool grad, float scale, float* loss) {
  float m = -INFINITY;
  for (int64_t j = 0; j < v; ++j) m = std::max(m, x[j]);
  const float picked = x[target];
  float sum = 0;
  for (int64_t j = 0; j < v; ++j) {
    float e = std::exp(x[j] - m);
    sum += e;
    if (grad) x[j] = e;
  }
  *loss = m + std::log(sum) - picked;
  if (!grad) return;
  const float k = scale / sum;
  for (int64_t j = 0; j < v; ++j) x[j] *= k;
  x[target] -= scale;
}

}  // namespace detail

namespace {

// Every row of `logits`: an ignored row gets loss 0 (and a zero gradient), the others `row`.
template <typename T, typename Row>
void for_each_row(T* logits, const CrossEntropyRows& a, Row&& row) {
  for (int64_t r = 0; r < a.rows; ++r) {
    T* x = logits + r * a.vocab;
    const int64_t t = a.target[r];
    if (t != a.ignore_index) {
      row(x, t, &a.loss[r]);
      continue;
    }
    a.loss[r] = 0;
    if (a.write_gradient) std::memset(x, 0, sizeof(T) * a.vocab);
  }
}

}  // namespace

void cross_entropy_rows(float* logits, const CrossEntropyRows& a) {
  for_each_row(logits, a, [&](float* x, int64_t t, float* loss) {
    xent_row(x, a.vocab, t, a.write_gradient, a.gradient_scale, loss);
  });
}

void cross_entropy_rows_bf16(uint16_t* logits, const CrossEntropyRows& a, float* scratch) {
  const bool avx512 = use_avx512(), avx2 = use_avx2();
  for_each_row(logits, a, [&](uint16_t* x, int64_t t, float* loss) {
    if (avx512) detail::bf16_to_float_avx512(x, scratch, a.vocab);
    else if (avx2) detail::bf16_to_float_avx2(x, scratch, a.vocab);
    else for (int64_t j = 0; j < a.vocab; ++j) scratch[j] = detail::bf16_to_float(x[j]);
    xent_row(scratch, a.vocab, t, a.write_gradient, a.gradient_scale, loss);
    if (!a.write_gradient) return;
    if (avx512) detail::float_to_bf16_avx512(scratch, x, a.vocab);
    else if (avx2) detail::float_to_bf16_avx2(scratch, x, a.vocab);
    else for (int64_t j = 0; j < a.vocab; ++j) x[j] = detail::float_to_bf16(scratch[j]);
  });
}

const char* cross_entropy_implementation() { return use_avx512() ? "avx512" : use_avx2() ? "avx2" : "scalar"; }

std::string cross_entropy_use(const std::string& name) {
  std::string previous = g_xent_choice.load() < 0 ? "auto" : cross_entropy_implementation();
  if (name == "auto") g_xent_choice.store(-1);
  else if (name == "scalar") g_xent_choice.store(0);
  else if (name == "avx512" && xent_has_avx512()) g_xent_choice.store(1);
  else if (name == "avx2" && detail::cross_entropy_avx2_supported()) g_xent_choice.store(2);
  else throw std::invalid_argument("cross_entropy_use: '" + name + "' is not one this CPU runs (avx512 needs "
                                   "AVX-512F, avx2 AVX2 and FMA)");
  return previous;
}

}  // namespace colossal::kernels::cpu
