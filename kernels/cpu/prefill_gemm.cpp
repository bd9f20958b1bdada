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
}  // namespace

bool prefill_gemm_supports(WeightFormat f) {
  return g_enabled.load(std::memory_order_relaxed) && detail::matvec_avx2_supports() && is_byte_format(f);
}

bool prefill_gemm_enable(bool on) { return g_enabled.exchange(on); }

int64_t prefill_gemm_min_tokens(WeightFormat f) { return is_quantized(f) ? 4 : kMaxVectors + 1; }

void prepare_prefill_input(PrefillInput& in, WeightFormat f, int64_t n, int64_t cols) {
  if (!is_byte_format(f)) throw std::invalid_argument(std::string("prefill_gemm: ") + to_string(f) + " is not quantized");
  in.format = f;
  in.n = n;
  in.cols = stored_cols(f, cols);
  in.logical_cols = cols;
  // A scale per 32 where the format has one (int8, int4, Q4_K, Q5_K), per 16 where it has 16.
  in.group = f == WeightFormat::kQ6K || f == WeightFormat::kQ3K || f == WeightFormat::kQ2K ? 16 : 32;
  const int64_t slots = in.tiles() * PrefillInput::kTile;
  in.q.resize(static_cast<size_t>(slots * in.cols));
  in.scale.resize(static_cast<size_t>(slots * (in.cols / kQuantBlock)));
  in.group_sum.resize(static_cast<size_t>(slots * (in.cols / in.group)));
  // The padding tokens of the last tile: zero values, scales and sums (they add nothing).
  for (int64_t i = n; i < slots; ++i) {
    const int64_t t = i / PrefillInput::kTile, slot = i % PrefillInput::kTile;
    for (int64_t c4 = 0; c4 < in.cols / 4; ++c4)
      std::memset(in.q.data() + (t * (in.cols / 4) + c4) * 16 + slot * 4, 0, 4);
    for (int64_t b = 0; b < in.cols / kQuantBlock; ++b)
      in.scale[static_cast<size_t>((t * (in.cols / kQuantBlock) + b) * PrefillInput::kTile + slot)] = 0;
    for (int64_t g = 0; g < in.cols / in.group; ++g)
      in.group_sum[static_cast<size_t>((t * (in.cols / in.group) + g) * PrefillInput::kTile + slot)] = 0;
  }
}

void quantize_prefill_rows(PrefillInput& in, const float* x, int64_t begin, int64_t end) {
  if (detail::matvec_avx2_supports()) detail::quantize_prefill_rows_avx2(in, x, begin, end);
  else detail::quantize_prefill_rows_scalar(in, x, begin, end);
}

void detail::quantize_prefill_rows_scalar(PrefillInput& in, const float* x, int64_t begin, int64_t end) {
  constexpr int64_t kTile = PrefillInput::kTile;
  const int64_t cols = in.cols, logical = in.logical_cols, blocks = cols / kQuantBlock, groups = cols / in.group;
  const int64_t per_block = kQuantBlock / in.group;  // groups per block of 32: 1 or 2
  int8_t v32[kQuantBlock];
  for (int64_t i = begin; i < end; ++i) {
    const float* src = x + i * logical;
    const int64_t tile = i / kTile, slot = i % kTile;
    int8_t* tq = in.q.data() + tile * cols * kTile + slot * 4;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t c0 = b * kQuantBlock, c1 = std::min(c0 + kQuantBlock, logical);
      float amax = 0;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(src[c]));
      const float d = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
      int32_t sums[2] = {0, 0};
      for (int64_t j = 0; j < kQuantBlock; ++j) {
        const int v = c0 + j < c1 ? static_cast<int>(std::nearbyint(src[c0 + j] * inv)) : 0;
        v32[j] = static_cast<int8_t>(std::clamp(v, -127, 127));
        sums[j / 16] += v32[j];
      }
      for (int64_t j = 0; j < kQuantBlock; j += 4) std::memcpy(tq + (c0 + j) * kTile, v32 + j, 4);
      in.scale[static_cast<size_t>((tile * blocks + b) * kTile + slot)] = d;
      float* gs = in.group_sum.data() + (tile * groups + b * per_block) * kTile + slot;
      if (per_block == 1) gs[0] = d * static_cast<float>(sums[0] + sums[1]);
      else gs[0] = d * static_cast<float>(sums[0]), gs[kTile] = d * static_cast<float>(sums[1]);
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
