#pragma once
// Matrix-vector products for the decode step (no LibTorch): y[m, rows] = x[m, cols] W^T for a
// handful of input rows (m <= kMaxVectors: one decode token per sequence, or a few tokens being
// verified), streaming W once at memory bandwidth. Decode is bound by the bytes of W, so W is
// kept in the smallest format the user accepts:
//
//   kF32  float      [rows, cols]
//   kBF16 bfloat16   [rows, cols]                       (x rounded to bf16; AVX512-BF16 dot products)
//   kF16  IEEE half  [rows, cols]                       (llama.cpp's f16; widened by F16C, x stays fp32)
//   kQ8   uint8      [rows, padded] = int8 value + 128  plus an fp16 scale per block of 32
//   kQ4   uint8      [rows, padded / 2], values 0..15 (= int4 + 8), plus an fp16 scale per block
//   kQ2K..kQ6K       llama.cpp's K-quant super-blocks as the GGUF file holds them (kernels/cpu/kquants.h):
//                    cols a multiple of 256, no separate scales; inputs quantized as Q8_K
//
// Quantized formats (the arithmetic of llama.cpp's q8_0/q4_0: symmetric per-block scales, fp16)
// pad the columns to a multiple of 64 with zero weights. Their dot products run in integers: x is
// quantized per call to int8 with one fp32 scale per block of 32 (per token, per block), and
// AVX512-VNNI multiplies the unsigned stored weights by the signed activations; the +128 (+8)
// offset is taken back exactly, in integers, from the activations' sums. Layout of a q4 row: each
// 64-column chunk is 32 bytes, byte j holding column j in its low nibble and column j + 32 in its
// high nibble (one shift and one mask unpack a chunk into a 64-byte vector in column order).
//
// The caller splits rows across threads: matvec(w, x, y, begin, end) computes rows [begin, end).
// Implementations: AVX-512 (F/BW/VNNI/BF16), AVX2 (with FMA and F16C) for CPUs without AVX-512,
// chosen at run time per format, and a portable scalar one that is also the tests' reference.
#include <cstdint>
#include <string>
#include <vector>

namespace colossal::kernels::cpu {

enum class WeightFormat : int32_t {
  kF32 = 0, kBF16 = 1, kQ8 = 2, kQ4 = 3, kQ2K = 4, kQ3K = 5, kQ4K = 6, kQ5K = 7, kQ6K = 8, kF16 = 9
};
const char* to_string(WeightFormat f);
/// "f32"/"fp32", "bf16", "f16"/"fp16", "int8"/"q8", "int4"/"q4", "q2_k" .. "q6_k"; throws std::invalid_argument
/// naming the rest.
WeightFormat weight_format(const std::string& name);

/// int8 or int4 (per-block scales, integer dot products).
constexpr bool is_quantized(WeightFormat f) { return f == WeightFormat::kQ8 || f == WeightFormat::kQ4; }
/// One of llama.cpp's K-quants, kept in its own blocks (read from GGUF; Q4_K, Q5_K and Q6_K also written).
constexpr bool is_kquant(WeightFormat f) {
  return f == WeightFormat::kQ2K || f == WeightFormat::kQ3K || f == WeightFormat::kQ4K || f == WeightFormat::kQ5K ||
         f == WeightFormat::kQ6K;
}
/// Stored as bytes (quantized or K-quant) rather than as float values.
constexpr bool is_byte_format(WeightFormat f) { return is_quantized(f) || is_kquant(f); }

constexpr int64_t kQuantBlock = 32;  // weights per scale
constexpr int64_t kQuantChunk = 64;  // quantized rows are padded to a multiple of this
constexpr int64_t kMaxVectors = 16;  // input rows per matvec call (the kernels share loads 8 at a time)

/// Columns a stored row holds (cols for f32/bf16/f16, padded to 64 for q8/q4).
int64_t stored_cols(WeightFormat f, int64_t cols);
/// Bytes of a [rows, cols] matrix's values (without scales).
int64_t data_bytes(WeightFormat f, int64_t rows, int64_t cols);
/// fp16 scales of a [rows, cols] matrix (0 for f32/bf16/f16).
int64_t scale_count(WeightFormat f, int64_t rows, int64_t cols);

struct MatrixView {
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0, cols = 0;
  const void* data = nullptr;
  const uint16_t* scales = nullptr;  // fp16 bits, [rows, stored_cols / 32]
};

/// Stores fp32 rows w[rows, cols] in `f` (data_bytes(f, ...) bytes, scale_count(f, ...) scales).
void pack_rows(const float* w, int64_t rows, int64_t cols, WeightFormat f, void* data, uint16_t* scales);
/// llama.cpp's q8_0 (kQ8) or q4_0 (kQ4) rows, `cols` a multiple of 32, stored as ours: the same
/// values and scales, bit for bit. A q8_0 block is an fp16 scale then 32 int8 values; a q4_0
/// block an fp16 scale then 16 bytes, value j in the low nibble of byte j, value j + 16 in the
/// high one (each value + 8).
void pack_ggml_rows(const uint8_t* blocks, int64_t rows, int64_t cols, WeightFormat f, void* data, uint16_t* scales);
/// The inverse of pack_ggml_rows: rows [begin, end) of int8/int4 weights (cols a multiple of 32)
/// as llama.cpp's q8_0/q4_0 blocks, (end - begin) * cols / 32 blocks of 34 (18) bytes.
void to_ggml_rows(const MatrixView& w, int64_t begin, int64_t end, uint8_t* blocks);
/// Rows [begin, end) of w back to fp32, out[(r - begin) * cols + c].
void unpack_rows(const MatrixView& w, int64_t begin, int64_t end, float* out);

/// Rows [begin, end) of w as bf16 bits (round to nearest even), out[(r - begin) * cols + c]: the
/// prefill path multiplies many tokens with a bf16 GEMM over weights unpacked this way.
void unpack_rows_bf16(const MatrixView& w, int64_t begin, int64_t end, uint16_t* out);

/// The input of one matvec call, prepared once for the format it will meet (quantized, rounded).
struct MatvecInput {
  WeightFormat format = WeightFormat::kF32;
  int64_t m = 0, cols = 0, stride = 0;  // stride: elements between input rows below
  const float* f32 = nullptr;           // kF32, kF16: the caller's x
  std::vector<uint16_t> bf16;           // kBF16: [m, stride]
  std::vector<int8_t> q;                // kQ8/kQ4 and K-quants: [m, stride]
  std::vector<float> block_scale;       // [m, stride / 32] (K-quants: [m, stride / 256])
  std::vector<int16_t> group_sums;      // K-quants: [m, stride / 16], the sum of q over each 16
  // [m, stride / 64, 16]: -offset * (sum of q over the lane's 4 columns), the starting value of
  // each int32 lane's dot product, so the stored weights' +128 (+8) cancels exactly in integers.
  std::vector<int32_t> lane_offset;
  // kQ4 on AVX2: [m, stride / 32], -8 * (sum of q over the block): the stored weights' +8 taken
  // back once per block (the AVX2 kernel multiplies the unsigned nibbles).
  std::vector<int32_t> block_offset;
};
/// x [m, cols] fp32 (m <= kMaxVectors) for weights in `f`; reuses `in`'s buffers (no allocation once
/// they are large enough). x must outlive `in` for kF32.
void prepare_input(MatvecInput& in, WeightFormat f, const float* x, int64_t m, int64_t cols);

/// y[i * ldy + r] = sum_c x[i, c] * w[r, c] for the prepared rows i < in.m and rows r in [begin, end).
void matvec(const MatrixView& w, const MatvecInput& in, float* y, int64_t ldy, int64_t begin, int64_t end);

/// "avx512", "avx2" or "scalar": what matvec runs for format f now.
const char* matvec_implementation(WeightFormat f);
/// Makes matvec use "scalar", "avx2", "avx512" (where the CPU has it for a format; scalar
/// otherwise) or "auto" (the widest the CPU has for each format); returns the previous choice.
/// For tests and benchmarks.
std::string matvec_use(const std::string& name);

/// Sum of n floats, read with the widest loads the CPU has: the benchmarks' read-bandwidth probe
/// (each thread sums its share of a buffer far larger than the caches).
float stream_sum(const float* p, int64_t n);

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);

namespace detail {
/// The vector kernels take up to kVectorGroup inputs at a time: inputs [first, first + count),
/// rows [begin, end). matvec() groups and tiles larger inputs.
constexpr int kVectorGroup = 8;
bool matvec_avx2_supports();  // AVX2, FMA and F16C: every format
void matvec_avx2(const MatrixView& w, const MatvecInput& in, int first, int count, float* y, int64_t ldy,
                 int64_t begin, int64_t end);
bool matvec_avx512_supports(WeightFormat f);
void matvec_avx512(const MatrixView& w, const MatvecInput& in, int first, int count, float* y, int64_t ldy,
                   int64_t begin, int64_t end);
void unpack_rows_bf16_avx512(const MatrixView& w, int64_t begin, int64_t end, uint16_t* out);
/// unpack_rows for int8/int4/f16/bf16 with AVX2 (the same values).
void unpack_rows_avx2(const MatrixView& w, int64_t begin, int64_t end, float* out);
float stream_sum_avx512(const float* p, int64_t n);
/// prepare_input's quantization for int8/int4 (in's sizes already set): per block of 32, the
/// scale, the values rounded to nearest even, and the lane tables.
void quantize_input_avx512(MatvecInput& in, const float* x, int32_t offset);
}  // namespace detail

}  // namespace colossal::kernels::cpu
