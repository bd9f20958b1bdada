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
/// quantize_prefill_rows for every token, in any split among threads).
struct PrefillInput {
  WeightFormat format = WeightFormat::kF32;
  int64_t n = 0, cols = 0;  // cols: the weights' stored columns (x's own, zero-padded to them)
  int64_t logical_cols = 0;  // x's own columns (its row stride)
  int64_t group = 32;       // columns per weight scale in the panels: 16 for K-quants
  std::vector<int8_t> q;    // [n, cols]
  std::vector<float> scale;      // [n, cols / 32]
  std::vector<float> group_sum;  // [n, cols / group]: scale * (the sum of q over the group)
};

/// Whether prefill_gemm runs format f on this CPU: int8, int4 and the K-quants where the CPU has
/// AVX2, FMA and F16C (enabled: see prefill_gemm_enable).
bool prefill_gemm_supports(WeightFormat f);
/// Turns the integer GEMM off (a benchmark's before/after, a test's reference) or back on;
/// returns the previous setting.
bool prefill_gemm_enable(bool on);

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
}  // namespace detail

}  // namespace colossal::kernels::cpu
