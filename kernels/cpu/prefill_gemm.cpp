// The prefill GEMM's dispatch and its input (kernels/cpu/prefill_gemm.h); the kernel itself is
// prefill_gemm_avx2.cpp.
#include "kernels/cpu/prefill_gemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace colossal::kernels::cpu {

namespace {
std::atomic<bool> g_enabled{true};

bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return has;
}
}  // namespace

bool prefill_gemm_supports(WeightFormat f) {
  return g_enabled.load(std::memory_order_relaxed) && cpu_has_avx2() && is_byte_format(f);
}

bool prefill_gemm_enable(bool on) { return g_enabled.exchange(on); }

void prepare_prefill_input(PrefillInput& in, WeightFormat f, int64_t n, int64_t cols) {
  if (!is_byte_format(f)) throw std::invalid_argument(std::string("prefill_gemm: ") + to_string(f) + " is not quantized");
  in.format = f;
  in.n = n;
  in.cols = stored_cols(f, cols);
  in.group = is_kquant(f) ? 16 : 32;
  // The logical columns, for quantize_prefill_rows's stride (the stored ones pad with zeros).
  in.q.resize(static_cast<size_t>(n * in.cols));
  in.scale.resize(static_cast<size_t>(n * (in.cols / kQuantBlock)));
  in.group_sum.resize(static_cast<size_t>(n * (in.cols / in.group)));
  in.logical_cols = cols;
}

void quantize_prefill_rows(PrefillInput& in, const float* x, int64_t begin, int64_t end) {
  const int64_t cols = in.cols, logical = in.logical_cols, blocks = cols / kQuantBlock;
  const int64_t per_block = kQuantBlock / in.group;  // groups per block of 32: 1 or 2
  for (int64_t i = begin; i < end; ++i) {
    const float* src = x + i * logical;
    int8_t* q = in.q.data() + i * cols;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t c0 = b * kQuantBlock, c1 = std::min(c0 + kQuantBlock, logical);
      float amax = 0;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(src[c]));
      const float d = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
      int32_t sums[2] = {0, 0};
      for (int64_t c = c0; c < c0 + kQuantBlock; ++c) {
        const int v = c < c1 ? static_cast<int>(std::nearbyint(src[c] * inv)) : 0;
        q[c] = static_cast<int8_t>(std::clamp(v, -127, 127));
        sums[(c - c0) / 16] += q[c];
      }
      in.scale[static_cast<size_t>(i * blocks + b)] = d;
      float* gs = in.group_sum.data() + i * (cols / in.group) + b * per_block;
      if (per_block == 1) gs[0] = d * static_cast<float>(sums[0] + sums[1]);
      else gs[0] = d * static_cast<float>(sums[0]), gs[1] = d * static_cast<float>(sums[1]);
    }
  }
}

void prefill_gemm(const MatrixView& w, const PrefillInput& in, float* y, int64_t ldy, int64_t begin, int64_t end) {
  if (begin % kPanelRows != 0)
    throw std::invalid_argument("prefill_gemm: rows must start at a multiple of 8, got " + std::to_string(begin));
  if (in.format != w.format || in.cols != stored_cols(w.format, w.cols))
    throw std::invalid_argument(std::string("prefill_gemm: the input was prepared for ") + to_string(in.format) +
                                " and " + std::to_string(in.cols) + " columns, the weights are " +
                                to_string(w.format) + " with " + std::to_string(stored_cols(w.format, w.cols)));
  if (!prefill_gemm_supports(w.format))
    throw std::invalid_argument(std::string("prefill_gemm: ") + to_string(w.format) + " is not run on this CPU");
  detail::prefill_gemm_avx2(w, in, y, ldy, begin, std::min(end, w.rows));
}

}  // namespace colossal::kernels::cpu
