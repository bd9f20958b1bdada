#pragma once
// llama.cpp's K-quants kept in the file's own blocks (no requantization, no repacking): the
// formats the GGUF files people download are in (Q4_K_M is Q4_K with some Q6_K tensors, Q5_K_M
// Q5_K with Q6_K, Q3_K_M and Q2_K mixes with Q4_K/Q5_K/Q6_K). A super-block holds 256 weights:
//
//   Q2_K  84 bytes: scales[16] (4-bit scale | 4-bit min << 4, per 16), qs[64] (2 bits), d, dmin (fp16)
//   Q3_K 110 bytes: hmask[32] (third bit), qs[64] (low 2 bits), scales[12] (16 x 6 bits, -32), d
//   Q4_K 144 bytes: d, dmin, scales[12] (8 scales + 8 mins of 6 bits, per 32), qs[128] (4 bits)
//   Q5_K 176 bytes: d, dmin, scales[12], qh[32] (fifth bit), qs[128]
//   Q6_K 210 bytes: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (int8, per 16), d
//
// Every one of them is, per group of 16 weights j, w = d * scale_j * q - dm * min_j with q an
// unsigned integer of at most 6 bits (Q6_K: q - 32 becomes min_j = 32 scale_j and dm = d; Q3_K:
// the signed 3-bit value + 4 likewise). The dot products run in integers against activations
// quantized as llama.cpp's Q8_K: per 256 values one fp32 scale, int8 values and the int16 sums of
// each 16, so the min terms cost one multiply per group: sum(w x) = dx (d sum_j scale_j
// sum(q x) - dm sum_j min_j sums_j).
#include <cstdint>

#include "kernels/cpu/matvec.h"

namespace colossal::kernels::cpu {

constexpr int64_t kSuperBlock = 256;

/// Bytes of one super-block of f (a K-quant format).
int64_t kquant_block_bytes(WeightFormat f);

/// A super-block in the common form above: q in input order, scale and min per 16 weights.
struct SuperBlock {
  uint8_t q[kSuperBlock];
  int16_t scale[16], min[16];
  float d, dm;
};
void unpack_superblock(WeightFormat f, const uint8_t* block, SuperBlock& out);

/// n weights (a multiple of 256) of f's blocks as fp32, as llama.cpp's dequantize_row_* computes them.
void dequantize_kquant(WeightFormat f, const uint8_t* blocks, int64_t n, float* out);

/// x[n] (n a multiple of 256) as llama.cpp's Q8_K: per 256, d[b] = 1 / (-127 / the value of
/// largest magnitude), q = round-to-even(x / d) clamped to 127, and group_sums[16 b + j] the sum of
/// q over values 16 j .. 16 j + 15.
void quantize_q8k(const float* x, int64_t n, int8_t* q, float* d, int16_t* group_sums);

/// x[n] (n a multiple of 256) as Q4_K, Q5_K or Q6_K blocks, fitted as llama.cpp's reference quantizer
/// fits them without an importance matrix (kquants_quantize.cpp); other formats throw.
void quantize_kquant(WeightFormat f, const float* x, int64_t n, uint8_t* blocks);

/// The scalar reference dot product of one row of f's blocks with one Q8_K input.
float kquant_dot(WeightFormat f, const uint8_t* row, const int8_t* q, const float* d, const int16_t* group_sums,
                 int64_t n);

namespace detail {
/// Inputs [first, first + count) (count <= kVectorGroup), rows [begin, end), AVX2 with FMA: the
/// weights' super-block decoded once and multiplied with every input.
void kquant_matvec_avx2(const MatrixView& w, const MatvecInput& in, int first, int count, float* y, int64_t ldy,
                        int64_t begin, int64_t end);
/// dequantize_kquant with AVX2, the same values bit for bit.
void kquant_dequantize_avx2(WeightFormat f, const uint8_t* blocks, int64_t n, float* out);
}  // namespace detail

}  // namespace colossal::kernels::cpu
