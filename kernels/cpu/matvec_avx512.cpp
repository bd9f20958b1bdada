// AVX-512 matvec: fp32 FMAs (f16 weights widened first), AVX512-BF16 pair dot products,
// AVX512-VNNI u8 x s8 dot products for the quantized formats. Built with -mavx512f -mavx512bw
// -mavx512vl -mavx512vnni -mavx512bf16 -mf16c; entered only after matvec_avx512_supports() checked
// the CPU for the format's needs.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/matvec.h"

namespace colossal::kernels::cpu::detail {
namespace {

// One output row for M input rows; columns in 16s, the tail masked.
template <int M>
void row_f32(const float* w, const MatvecInput& in, int first, int64_t cols, float* y, int64_t ldy, int64_t r) {
  __m512 acc[M], acc2[M];
  for (int i = 0; i < M; ++i) acc[i] = acc2[i] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 32 <= cols; c += 32) {  // two independent chains per input row
    const __m512 w0 = _mm512_loadu_ps(w + c), w1 = _mm512_loadu_ps(w + c + 16);
    for (int i = 0; i < M; ++i) {
      const float* x = in.f32 + (first + i) * in.stride + c;
      acc[i] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x), acc[i]);
      acc2[i] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + 16), acc2[i]);
    }
  }
  for (; c < cols; c += 16) {
    const __mmask16 k = cols - c >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (cols - c)) - 1);
    const __m512 w0 = _mm512_maskz_loadu_ps(k, w + c);
    for (int i = 0; i < M; ++i)
      acc[i] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(k, in.f32 + (first + i) * in.stride + c), acc[i]);
  }
  for (int i = 0; i < M; ++i) y[(first + i) * ldy + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i], acc2[i]));
}

// f16 weights widened by F16C's 512-bit conversion (AVX512F), fp32 inputs; a scalar tail.
template <int M>
void row_f16(const uint16_t* w, const MatvecInput& in, int first, int64_t cols, float* y, int64_t ldy, int64_t r) {
  __m512 acc[M], acc2[M];
  for (int i = 0; i < M; ++i) acc[i] = acc2[i] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 32 <= cols; c += 32) {
    const __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + c)));
    const __m512 w1 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + c + 16)));
    for (int i = 0; i < M; ++i) {
      const float* x = in.f32 + (first + i) * in.stride + c;
      acc[i] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x), acc[i]);
      acc2[i] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + 16), acc2[i]);
    }
  }
  for (int i = 0; i < M; ++i) {
    float s = _mm512_reduce_add_ps(_mm512_add_ps(acc[i], acc2[i]));
    for (int64_t t = c; t < cols; ++t) s += _cvtsh_ss(w[t]) * in.f32[(first + i) * in.stride + t];
    y[(first + i) * ldy + r] = s;
  }
}

// bf16 weights and inputs: 32 columns per dot-product instruction; the input is zero-padded to 32.
template <int M>
void row_bf16(const uint16_t* w, const MatvecInput& in, int first, int64_t cols, float* y, int64_t ldy, int64_t r) {
  __m512 acc[M], acc2[M];
  for (int i = 0; i < M; ++i) acc[i] = acc2[i] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 64 <= cols; c += 64) {
    const __m512i w0 = _mm512_loadu_si512(w + c), w1 = _mm512_loadu_si512(w + c + 32);
    for (int i = 0; i < M; ++i) {
      const uint16_t* x = in.bf16.data() + (first + i) * in.stride + c;
      acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)w0, (__m512bh)_mm512_loadu_si512(x));
      acc2[i] = _mm512_dpbf16_ps(acc2[i], (__m512bh)w1, (__m512bh)_mm512_loadu_si512(x + 32));
    }
  }
  for (; c < cols; c += 32) {
    const __mmask32 k = cols - c >= 32 ? __mmask32(0xFFFFFFFFu) : __mmask32((1u << (cols - c)) - 1);
    const __m512i w0 = _mm512_maskz_loadu_epi16(k, w + c);
    for (int i = 0; i < M; ++i)
      acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)w0,
                                (__m512bh)_mm512_loadu_si512(in.bf16.data() + (first + i) * in.stride + c));
  }
  for (int i = 0; i < M; ++i) y[(first + i) * ldy + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i], acc2[i]));
}

// 64 stored weights of chunk k as unsigned bytes in column order. A q4 chunk's 32 bytes are
// loaded into both halves of the vector; the upper half's 64-bit lanes shift right by 4 so each
// byte's high nibble comes down (the next byte's low bits that arrive above it are masked off):
// one shift and one mask, no shuffle.
template <bool Q4>
inline __m512i load_chunk(const uint8_t* row, int64_t k) {
  if constexpr (!Q4) {
    return _mm512_loadu_si512(row + k * kQuantChunk);
  } else {
    const __m512i both =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + k * kQuantChunk / 2)));
    const __m512i shift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
    return _mm512_and_si512(_mm512_srlv_epi64(both, shift), _mm512_set1_epi8(0x0F));
  }
}

// Lane l of chunk j (of a group of 8) takes scale 2j for l < 8, 2j + 1 otherwise.
inline __m512i pick_scales(int64_t j) {
  static const __m512i kPick[8] = {
      _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
      _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2),
      _mm512_set_epi32(5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 4),
      _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 6),
      _mm512_set_epi32(9, 9, 9, 9, 9, 9, 9, 9, 8, 8, 8, 8, 8, 8, 8, 8),
      _mm512_set_epi32(11, 11, 11, 11, 11, 11, 11, 11, 10, 10, 10, 10, 10, 10, 10, 10),
      _mm512_set_epi32(13, 13, 13, 13, 13, 13, 13, 13, 12, 12, 12, 12, 12, 12, 12, 12),
      _mm512_set_epi32(15, 15, 15, 15, 15, 15, 15, 15, 14, 14, 14, 14, 14, 14, 14, 14)};
  return kPick[j];
}

// Quantized rows: per chunk of 64 columns (two blocks), one VNNI instruction per input row gives
// 16 exact int32 lane sums (started from the lane's offset correction); they are converted and
// scaled by weight scale x input scale of the lane's block. Those products are made 16 blocks
// (8 chunks) at a time, and each chunk picks its two with one permute (8-15% faster on one core
// than a multiply per chunk, measured in one process alternating the two; a second accumulator
// per input measured slower).
template <int M, bool Q4>
void row_quant(const uint8_t* w, const uint16_t* scales, const MatvecInput& in, int first, int64_t chunks, float* y,
               int64_t ldy, int64_t r) {
  __m512 acc[M];
  for (int i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
  const int64_t blocks = chunks * 2, in_blocks = in.stride / kQuantBlock;
  for (int64_t k0 = 0; k0 < chunks; k0 += 8) {
    const int64_t left = blocks - 2 * k0;
    const __mmask16 km = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
    const __m512 ws = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(km, scales + 2 * k0));
    __m512 scale[M];
    for (int i = 0; i < M; ++i)
      scale[i] = _mm512_mul_ps(ws, _mm512_maskz_loadu_ps(km, in.block_scale.data() + (first + i) * in_blocks + 2 * k0));
    const int64_t n = std::min<int64_t>(8, chunks - k0);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = k0 + j;
      const __m512i u = load_chunk<Q4>(w, k);
      const __m512i pick = pick_scales(j);
      for (int i = 0; i < M; ++i) {
        const int64_t lane = ((first + i) * chunks + k) * 16;
        const __m512i start = _mm512_loadu_si512(in.lane_offset.data() + lane);
        const __m512i a = _mm512_loadu_si512(in.q.data() + (first + i) * in.stride + k * kQuantChunk);
        const __m512i dot = _mm512_dpbusd_epi32(start, u, a);
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(pick, scale[i]), acc[i]);
      }
    }
  }
  for (int i = 0; i < M; ++i) y[(first + i) * ldy + r] = _mm512_reduce_add_ps(acc[i]);
}

template <int M>
void rows(const MatrixView& w, const MatvecInput& in, int first, float* y, int64_t ldy, int64_t begin, int64_t end) {
  switch (w.format) {
    case WeightFormat::kF32:
      for (int64_t r = begin; r < end; ++r) row_f32<M>(static_cast<const float*>(w.data) + r * w.cols, in, first, w.cols, y, ldy, r);
      return;
    case WeightFormat::kBF16:
      for (int64_t r = begin; r < end; ++r)
        row_bf16<M>(static_cast<const uint16_t*>(w.data) + r * w.cols, in, first, w.cols, y, ldy, r);
      return;
    case WeightFormat::kF16:
      for (int64_t r = begin; r < end; ++r)
        row_f16<M>(static_cast<const uint16_t*>(w.data) + r * w.cols, in, first, w.cols, y, ldy, r);
      return;
    case WeightFormat::kQ8:
    case WeightFormat::kQ4: {
      const int64_t stored = stored_cols(w.format, w.cols), chunks = stored / kQuantChunk;
      const int64_t row_bytes = data_bytes(w.format, 1, w.cols), blocks = stored / kQuantBlock;
      const auto* base = static_cast<const uint8_t*>(w.data);
      for (int64_t r = begin; r < end; ++r) {
        if (w.format == WeightFormat::kQ8)
          row_quant<M, false>(base + r * row_bytes, w.scales + r * blocks, in, first, chunks, y, ldy, r);
        else
          row_quant<M, true>(base + r * row_bytes, w.scales + r * blocks, in, first, chunks, y, ldy, r);
      }
      return;
    }
    default: return;  // K-quants: kquants_avx2.cpp
  }
}


}  // namespace

// Quantized rows to bf16: per chunk, 64 stored bytes -> 4 x 16 floats (minus the offset, times the
// block's scale) -> bf16 with AVX512-BF16's round-to-nearest-even conversion.
void unpack_rows_bf16_avx512(const MatrixView& w, int64_t begin, int64_t end, uint16_t* out) {
  const int64_t stored = stored_cols(w.format, w.cols), chunks = stored / kQuantChunk;
  const int64_t row_bytes = data_bytes(w.format, 1, w.cols), blocks = stored / kQuantBlock;
  const bool q4 = w.format == WeightFormat::kQ4;
  const __m512i offset = _mm512_set1_epi32(q4 ? 8 : 128);
  alignas(64) uint16_t tmp[kQuantChunk];
  for (int64_t r = begin; r < end; ++r) {
    const auto* row = static_cast<const uint8_t*>(w.data) + r * row_bytes;
    uint16_t* dst = out + (r - begin) * w.cols;
    for (int64_t k = 0; k < chunks; ++k) {
      const __m512i u = q4 ? load_chunk<true>(row, k) : load_chunk<false>(row, k);
      const float s0 = half_to_float(w.scales[r * blocks + 2 * k]), s1 = half_to_float(w.scales[r * blocks + 2 * k + 1]);
      __m512 f[4];
      for (int part = 0; part < 4; ++part) {
        __m128i b;
        switch (part) {
          case 0: b = _mm512_extracti32x4_epi32(u, 0); break;
          case 1: b = _mm512_extracti32x4_epi32(u, 1); break;
          case 2: b = _mm512_extracti32x4_epi32(u, 2); break;
          default: b = _mm512_extracti32x4_epi32(u, 3); break;
        }
        const __m512i v = _mm512_sub_epi32(_mm512_cvtepu8_epi32(b), offset);
        f[part] = _mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(part < 2 ? s0 : s1));
      }
      const __m512i lo = (__m512i)_mm512_cvtne2ps_pbh(f[1], f[0]), hi = (__m512i)_mm512_cvtne2ps_pbh(f[3], f[2]);
      const int64_t c0 = k * kQuantChunk, n = std::min<int64_t>(kQuantChunk, w.cols - c0);
      if (n == kQuantChunk) {
        _mm512_storeu_si512(dst + c0, lo);
        _mm512_storeu_si512(dst + c0 + 32, hi);
      } else {
        _mm512_store_si512(tmp, lo);
        _mm512_store_si512(tmp + 32, hi);
        std::copy(tmp, tmp + n, dst + c0);
      }
    }
  }
}

void quantize_input_avx512(MatvecInput& in, const float* x, int32_t offset) {
  const int64_t cols = in.cols, stride = in.stride, blocks = stride / kQuantBlock, chunks = stride / kQuantChunk;
  const __m512i ones = _mm512_set1_epi8(1), neg_offset = _mm512_set1_epi32(-offset);
  for (int64_t i = 0; i < in.m; ++i) {
    const float* src = x + i * cols;
    int8_t* q = in.q.data() + i * stride;
    float* d = in.block_scale.data() + i * blocks;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t c0 = b * kQuantBlock;
      const int64_t n0 = std::clamp<int64_t>(cols - c0, 0, 16), n1 = std::clamp<int64_t>(cols - c0 - 16, 0, 16);
      const __m512 v0 = _mm512_maskz_loadu_ps(__mmask16((1u << n0) - 1), src + c0);
      const __m512 v1 = _mm512_maskz_loadu_ps(__mmask16((1u << n1) - 1), src + c0 + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
      const float scale = amax / 127.0f, inverse = scale != 0 ? 1.0f / scale : 0.0f;
      const __m512 id = _mm512_set1_ps(inverse);
      // Round to nearest even (the default rounding mode), then narrow: |values| <= 127.
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + c0), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, id))));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + c0 + 16),
                       _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, id))));
      d[b] = scale;
    }
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t lane = (i * chunks + k) * 16;
      // Sum of each lane's 4 values: a VNNI product with ones; times -offset.
      const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(q + k * kQuantChunk));
      _mm512_storeu_si512(in.lane_offset.data() + lane, _mm512_mullo_epi32(sums, neg_offset));
    }
  }
}

float stream_sum_avx512(const float* p, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
  }
  float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  for (; i < n; ++i) s += p[i];
  return s;
}

bool matvec_avx512_supports(WeightFormat f) {
  static const bool f32 = __builtin_cpu_supports("avx512f");
  static const bool f16 = f32 && __builtin_cpu_supports("f16c");
  static const bool bf16 = f32 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16");
  static const bool vnni = f32 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                           __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("f16c");
  switch (f) {
    case WeightFormat::kF32: return f32;
    case WeightFormat::kF16: return f16;
    case WeightFormat::kBF16: return bf16;
    case WeightFormat::kQ8:
    case WeightFormat::kQ4: return vnni;
    default: return false;  // K-quants: the AVX2 kernel
  }
  return false;
}

void matvec_avx512(const MatrixView& w, const MatvecInput& in, int first, int count, float* y, int64_t ldy,
                   int64_t begin, int64_t end) {
  using Rows = void (*)(const MatrixView&, const MatvecInput&, int, float*, int64_t, int64_t, int64_t);
  static constexpr Rows kRows[] = {rows<1>, rows<2>, rows<3>, rows<4>, rows<5>, rows<6>, rows<7>, rows<8>};
  kRows[std::clamp(count, 1, 8) - 1](w, in, first, y, ldy, begin, end);
}

}  // namespace colossal::kernels::cpu::detail
