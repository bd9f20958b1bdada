#pragma once
// Prompt processing over quantized weights: y[n, rows] = x[n, cols] W^T for a whole prompt at once,
// in integers. Decode streams W once per token and is bound by its bytes (kernels/cpu/matvec); a
// prompt reuses every weight for every token, so its bound is arithmetic, and on AVX2 one
// maddubs does 32 byte multiplies where an fp32 FMA does 8.
//
// The tokens are quantized once per call to int8 with one fp32 scale per 32 values (finer than
// llama.cpp's Q8_K per 256 for K-quants). W is taken 8 rows at a time as a "panel": the rows'
// values as bytes, interleaved 4 columns at a time, so one 32-byte load holds 4 columns of all 8
// rows and a token's 4 matching activations broadcast to every lane; each product lands in its
// row's lane (no horizontal sums), and 4 tokens share each load of the weights. Beside the bytes,
// a float scale and offset per group of columns: w = scale * q - offset, q unsigned (at most 6
// bits: int4 and every K-quant, per llama.cpp's own decomposition, kernels/cpu/kquants.h) or
// signed (int8). The panel is rebuilt on each call from the stored format into a buffer the thread
// keeps (a few KiB, in L1/L2): one pass over the weights that all the prompt's tokens share.
#include <cstdint>
#include <vector>

#include "kernels/cpu/matvec.h"

namespace colossal::kernels::cpu {

constexpr int64_t kPanelRows = 8;

/// The prompt's tokens as prefill_gemm reads them (prepare_prefill_input, then
/// quantize_prefill_rows for every token, in any split among threads). Stored 4 tokens to a tile,
/// interleaved (a tile's 4 tokens' values for 4 columns are 16 adjacent bytes, their scales 4
/// adjacent floats) so the kernel reads all four from one pointer; the last tile is padded with
/// zero tokens.
struct PrefillInput {
  static constexpr int64_t kTile = 4;
  WeightFormat format = WeightFormat::kF32;
  int64_t n = 0, cols = 0;  // cols: the weights' stored columns (x's own, zero-padded to them)
  int64_t logical_cols = 0;  // x's own columns (its row stride)
  int64_t group = 32;       // columns per weight scale in the panels: 16 for Q6_K, Q3_K, Q2_K
  std::vector<int8_t> q;    // [tiles, cols / 4, 4 tokens, 4]
  std::vector<float> scale;      // [tiles, cols / 32, 4 tokens]
  std::vector<float> group_sum;  // [tiles, cols / group, 4 tokens]: scale * (the sum of q over the group)

  int64_t tiles() const { return (n + kTile - 1) / kTile; }
  /// Token i's quantized value at column c, its scale for block b of 32, its sum over group g.
  int8_t value(int64_t i, int64_t c) const {
    return q[static_cast<size_t>(((i / kTile) * (cols / 4) + c / 4) * 16 + (i % kTile) * 4 + c % 4)];
  }
  float block_scale(int64_t i, int64_t b) const {
    return scale[static_cast<size_t>(((i / kTile) * (cols / 32) + b) * kTile + i % kTile)];
  }
  float sum_over_group(int64_t i, int64_t g) const {
    return group_sum[static_cast<size_t>(((i / kTile) * (cols / group) + g) * kTile + i % kTile)];
  }
};

/// Whether prefill_gemm runs format f on this CPU: int8, int4 and the K-quants where the CPU has
/// AVX2, FMA and F16C (enabled: see prefill_gemm_enable).
bool prefill_gemm_supports(WeightFormat f);
/// Turns the integer GEMM off (a benchmark's before/after, a test's reference) or back on;
/// returns the previous setting.
bool prefill_gemm_enable(bool on);

/// The fewest tokens for which the GEMM beats the matvec kernel (which reads the weights once but
/// multiplies them token by token): int8 and int4 from 4 tokens on (bench_matvec's batched table on
/// Zen 3: 1.3x at 4, 2x at 16); K-quants not within the matvec's 16 (rebuilding a K-quant panel
/// costs more than 16 tokens of its matvec save), so from 17.
int64_t prefill_gemm_min_tokens(WeightFormat f);

/// Sizes `in` for n tokens of x[n, cols] (cols the matrix's logical columns) against weights in f;
/// reuses its buffers.
void prepare_prefill_input(PrefillInput& in, WeightFormat f, int64_t n, int64_t cols);
/// Quantizes tokens [begin, end) of x (row stride: the logical cols given to prepare_prefill_input).
void quantize_prefill_rows(PrefillInput& in, const float* x, int64_t begin, int64_t end);

/// y[i * ldy + r] = sum_c x[i, c] w[r, c] for every token i < in.n and rows r in [begin, end);
/// begin a multiple of kPanelRows. The caller splits rows among threads.
void prefill_gemm(const MatrixView& w, const PrefillInput& in, float* y, int64_t ldy, int64_t begin, int64_t end);

namespace detail {
void prefill_gemm_avx2(const MatrixView& w, const PrefillInput& in, float* y, int64_t ldy, int64_t begin,
                       int64_t end);
/// quantize_prefill_rows with AVX2: the same values, scales and sums.
void quantize_prefill_rows_avx2(PrefillInput& in, const float* x, int64_t begin, int64_t end);
/// The portable one (also the tests' reference for it).
void quantize_prefill_rows_scalar(PrefillInput& in, const float* x, int64_t begin, int64_t end);
}  // namespace detail

}  // namespace colossal::kernels::cpu
