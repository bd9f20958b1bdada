#pragma once
// NF4, the 4-bit NormalFloat format of QLoRA (Dettmers et al., 2023), laid out as bitsandbytes
// stores it, so a weight quantized there reads here and the other way round (no LibTorch):
//
//   codes   uint8 [ceil(n / 2)]: element 2k in the high nibble of byte k, element 2k + 1 in the low
//   absmax  one scale per block of 64 consecutive elements of the flattened (row-major) matrix
//
// An element is kNf4Values[code] * absmax[its block]. A value is quantized to the nearest of the
// 16 levels after dividing by its block's absmax (x times 1/absmax, clamped to [-1, 1]; a value
// exactly between two levels takes the lower one). QLoRA's double quantization stores the absmax
// values themselves in 8 bits (core/nn/quantized_weight.h: minus their mean, blockwise over 256
// with bitsandbytes' signed dynamic map); the kernels here take the absmax already decoded.
#include <cstdint>

namespace colossal::kernels::cpu {

constexpr int64_t kNf4Block = 64;  // elements per absmax

/// The 16 NF4 levels (quantiles of N(0, 1) scaled to [-1, 1], with an exact 0), ascending.
extern const float kNf4Values[16];

/// Blockwise quantization to the nearest entry of a sorted `table` of `levels` values: for each
/// block of `block` elements of x[0, n) (the last one may be shorter), absmax[b] = max |x| and
/// index[i] = the entry nearest x[i] * (1 / absmax) (clamped to [-1, 1]; ties to the lower entry).
/// Writes one index per element (uint8): NF4 packs them after, the 8-bit absmax code keeps them.
void quantize_blockwise(const float* x, int64_t n, int64_t block, const float* table, int levels, uint8_t* index,
                        float* absmax);

/// x[0, n) to NF4: packed codes (ceil(n / 2) bytes) and one absmax per block of 64.
void nf4_quantize(const float* x, int64_t n, uint8_t* codes, float* absmax);

/// Elements [begin, end) of an NF4 matrix to fp32, out[i - begin]. absmax: the decoded scales
/// from block begin / 64 on (absmax[0] is the block holding element begin).
void nf4_dequantize(const uint8_t* codes, const float* absmax, int64_t begin, int64_t end, float* out);

/// "avx512" or "scalar": what nf4_dequantize runs.
const char* nf4_implementation();

namespace detail {
bool nf4_avx512_supports();
/// Whole blocks only: begin a multiple of 64, end - begin a multiple of 64; absmax from begin's block.
void nf4_dequantize_avx512(const uint8_t* codes, const float* absmax, int64_t begin, int64_t end, float* out);
}  // namespace detail

}  // namespace colossal::kernels::cpu
