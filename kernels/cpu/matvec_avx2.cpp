// The matvec kernels for CPUs with AVX2 and FMA but not AVX-512 (compiled with -mavx2 -mfma
// -mf16c; chosen at run time). Same arithmetic as the AVX-512 ones, 8 lanes wide:
//  * fp32: FMAs;  bf16: both operands widened to fp32 (a shift) and FMAs;  f16: F16C widening, FMAs;
//  * int8/int4: per block of 32, the stored weights made signed again (q8: xor 0x80; q4: the
//    nibble minus 8) and multiplied with the int8 activations by maddubs/madd. maddubs takes an
//    unsigned and a signed operand, so it gets |w| and the activations with w's sign (|w| <= 128,
//    |x| <= 127: a pair sums to at most 32512, below int16 saturation); int4 skips the signs: its
//    stored nibbles (0..15) are the unsigned operand and the +8 comes back from the input's block
//    sum. Eight blocks' int32 sums are gathered into one vector and scaled by 8 weight scales x
//    input scales at once (row_groups: one conversion and one multiply-add per 256 columns, not a
//    scalar product, broadcast and multiply-add per block; int4 decode 1.3x faster).
#include <immintrin.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/adamw.h"  // detail::bf16_to_float
#include "kernels/cpu/matvec.h"

namespace colossal::kernels::cpu::detail {
namespace {

// 8 bf16 values widened to fp32.
inline __m256 bf16x8(const uint16_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

// fp32 or f16 weights (widened by F16C, one conversion per 8) against fp32 inputs: FMAs.
template <typename W>
inline __m256 widen8(const W* p) {
  if constexpr (std::is_same_v<W, float>) return _mm256_loadu_ps(p);
  else return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
template <typename W>
inline float widen(W v) {
  if constexpr (std::is_same_v<W, float>) return v;
  else return _cvtsh_ss(v);
}

template <int M, typename W>  // W: float (fp32) or uint16_t (f16 bits)
void row_fp(const W* w, const MatvecInput& in, int first, int64_t cols, float* y, int64_t ldy, int64_t r) {
  __m256 acc[M];
  for (int i = 0; i < M; ++i) acc[i] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= cols; c += 8) {
    const __m256 wv = widen8(w + c);
    for (int i = 0; i < M; ++i)
      acc[i] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(in.f32 + (first + i) * in.stride + c), acc[i]);
  }
  for (int i = 0; i < M; ++i) {
    float s = hsum(acc[i]);
    for (int64_t t = c; t < cols; ++t) s += widen(w[t]) * in.f32[(first + i) * in.stride + t];
    y[(first + i) * ldy + r] = s;
  }
}

template <int M>
void row_bf16(const uint16_t* w, const MatvecInput& in, int first, int64_t cols, float* y, int64_t ldy, int64_t r) {
  __m256 acc[M];
  for (int i = 0; i < M; ++i) acc[i] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= cols; c += 8) {
    const __m256 wv = bf16x8(w + c);
    for (int i = 0; i < M; ++i) acc[i] = _mm256_fmadd_ps(wv, bf16x8(in.bf16.data() + (first + i) * in.stride + c), acc[i]);
  }
  for (int i = 0; i < M; ++i) {
    float s = hsum(acc[i]);
    for (int64_t t = c; t < cols; ++t) s += bf16_to_float(w[t]) * bf16_to_float(in.bf16[(first + i) * in.stride + t]);
    y[(first + i) * ldy + r] = s;
  }
}

// Sum over 32 columns of w * x as 8 int32 lanes (w signed int8, x int8).
inline __m256i block_dot(__m256i w, __m256i x) {
  const __m256i products = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(products, _mm256_set1_epi16(1));
}

// Eight int32x8 vectors summed lane-wise: their 8 totals, in order.
inline __m256i sum8(__m256i p0, __m256i p1, __m256i p2, __m256i p3, __m256i p4, __m256i p5, __m256i p6,
                         __m256i p7) {
  // hadd within each 128-bit half: after two rounds each half holds vectors 0-3 (4-7) over its 4 lanes.
  const __m256i r0123 = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
  const __m256i r4567 = _mm256_hadd_epi32(_mm256_hadd_epi32(p4, p5), _mm256_hadd_epi32(p6, p7));
  return _mm256_add_epi32(_mm256_permute2x128_si256(r0123, r4567, 0x20),
                          _mm256_permute2x128_si256(r0123, r4567, 0x31));
}

// One row, 8 blocks of 32 (256 columns) at a time: each block's 32 products summed in integers,
// the 8 block sums gathered into one vector, then one conversion and one multiply-add with the 8
// blocks' combined scales (weight scales converted together, times the input's) for all of them,
// instead of a scalar scale product, broadcast and multiply-add per block. The row is still read
// front to back (one stream per thread). int4: the unsigned nibbles go straight into maddubs
// (15 x 127 x 2 fits int16) and the +8 comes back per block from the input's sums; int8: the sign
// trick of block_dot. Returns the row's sum over the first `groups` x 256 columns.
template <bool Q4>
inline float row_groups(const uint8_t* w, const uint16_t* scales, const int8_t* x, const float* x_scale,
                        const int32_t* x_offset, int64_t groups) {
  const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256 acc = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m256i p[8];
    for (int c = 0; c < 4; ++c) {  // chunk 4g + c: blocks 8g + 2c and 8g + 2c + 1
      const __m256i* xb = reinterpret_cast<const __m256i*>(x + (8 * g + 2 * c) * kQuantBlock);
      if constexpr (Q4) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + (4 * g + c) * 32));
        p[2 * c] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_and_si256(v, low), _mm256_loadu_si256(xb)), ones);
        p[2 * c + 1] = _mm256_madd_epi16(
            _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), low), _mm256_loadu_si256(xb + 1)), ones);
      } else {
        const auto* wb = reinterpret_cast<const __m256i*>(w + (8 * g + 2 * c) * 32);
        p[2 * c] = block_dot(_mm256_xor_si256(_mm256_loadu_si256(wb), flip), _mm256_loadu_si256(xb));
        p[2 * c + 1] = block_dot(_mm256_xor_si256(_mm256_loadu_si256(wb + 1), flip), _mm256_loadu_si256(xb + 1));
      }
    }
    __m256i sums = sum8(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
    if constexpr (Q4)
      sums = _mm256_add_epi32(sums, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x_offset + 8 * g)));
    const __m256 scale = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 8 * g))),
                                       _mm256_loadu_ps(x_scale + 8 * g));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc);
  }
  return hsum(acc);
}

template <int M, bool Q4>
void row_quant(const uint8_t* w, const uint16_t* scales, const MatvecInput& in, int first, int64_t chunks, float* y,
               int64_t ldy, int64_t r) {
  __m256 acc[M];
  for (int i = 0; i < M; ++i) acc[i] = _mm256_setzero_ps();
  const int64_t in_blocks = in.stride / kQuantBlock;
  // Whole groups of 8 blocks through row_groups (int4 needs the inputs' block offsets), the rest here.
  const int64_t groups = Q4 && in.block_offset.empty() ? 0 : chunks / 4;
  float head[M] = {};
  if (groups > 0)
    for (int i = 0; i < M; ++i)
      head[i] = row_groups<Q4>(w, scales, in.q.data() + (first + i) * in.stride,
                               in.block_scale.data() + (first + i) * in_blocks,
                               Q4 ? in.block_offset.data() + (first + i) * in_blocks : nullptr, groups);
  for (int64_t k = 4 * groups; k < chunks; ++k) {
    __m256i blk[2];
    if constexpr (Q4) {
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k * kQuantChunk / 2));
      const __m256i low = _mm256_set1_epi8(0x0F), eight = _mm256_set1_epi8(8);
      blk[0] = _mm256_sub_epi8(_mm256_and_si256(packed, low), eight);
      blk[1] = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(packed, 4), low), eight);
    } else {
      const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
      blk[0] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k * kQuantChunk)), flip);
      blk[1] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k * kQuantChunk + 32)), flip);
    }
    for (int h = 0; h < 2; ++h) {
      const int64_t b = 2 * k + h;
      const float ws = _cvtsh_ss(scales[b]);  // F16C: the software conversion costs more than the block
      for (int i = 0; i < M; ++i) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in.q.data() + (first + i) * in.stride + b * kQuantBlock));
        const __m256 scale = _mm256_set1_ps(ws * in.block_scale[(first + i) * in_blocks + b]);
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_dot(blk[h], x)), scale, acc[i]);
      }
    }
  }
  for (int i = 0; i < M; ++i) y[(first + i) * ldy + r] = head[i] + hsum(acc[i]);
}

template <int M>
void rows(const MatrixView& w, const MatvecInput& in, int first, float* y, int64_t ldy, int64_t begin, int64_t end) {
  switch (w.format) {
    case WeightFormat::kF32:
      for (int64_t r = begin; r < end; ++r)
        row_fp<M>(static_cast<const float*>(w.data) + r * w.cols, in, first, w.cols, y, ldy, r);
      return;
    case WeightFormat::kBF16:
      for (int64_t r = begin; r < end; ++r)
        row_bf16<M>(static_cast<const uint16_t*>(w.data) + r * w.cols, in, first, w.cols, y, ldy, r);
      return;
    case WeightFormat::kF16:
      for (int64_t r = begin; r < end; ++r)
        row_fp<M>(static_cast<const uint16_t*>(w.data) + r * w.cols, in, first, w.cols, y, ldy, r);
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

// int8/int4/f16/bf16 rows to fp32 (the prefill GEMM's weights on CPUs without bf16 units): per
// block of 32, the signed values widened and multiplied by the block's scale, as unpack_rows does;
// f16 by F16C, bf16 by a shift.
void unpack_rows_avx2(const MatrixView& w, int64_t begin, int64_t end, float* out) {
  if (w.format == WeightFormat::kF16 || w.format == WeightFormat::kBF16) {
    const bool half = w.format == WeightFormat::kF16;
    for (int64_t r = begin; r < end; ++r) {
      const uint16_t* src = static_cast<const uint16_t*>(w.data) + r * w.cols;
      float* dst = out + (r - begin) * w.cols;
      int64_t c = 0;
      for (; c + 8 <= w.cols; c += 8)
        _mm256_storeu_ps(dst + c, half ? widen8(src + c) : bf16x8(src + c));
      for (; c < w.cols; ++c) dst[c] = half ? widen(src[c]) : bf16_to_float(src[c]);
    }
    return;
  }
  const int64_t stored = stored_cols(w.format, w.cols), blocks = stored / kQuantBlock;
  const int64_t row_bytes = data_bytes(w.format, 1, w.cols), full = w.cols / kQuantChunk;
  const bool q4 = w.format == WeightFormat::kQ4;
  std::vector<float> tail(static_cast<size_t>(kQuantChunk));
  for (int64_t r = begin; r < end; ++r) {
    const auto* row = static_cast<const uint8_t*>(w.data) + r * row_bytes;
    float* dst = out + (r - begin) * w.cols;
    auto chunk = [&](int64_t k, float* to) {
      __m256i blk[2];
      if (q4) {
        const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + k * kQuantChunk / 2));
        const __m256i low = _mm256_set1_epi8(0x0F), eight = _mm256_set1_epi8(8);
        blk[0] = _mm256_sub_epi8(_mm256_and_si256(packed, low), eight);
        blk[1] = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(packed, 4), low), eight);
      } else {
        const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
        blk[0] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + k * kQuantChunk)), flip);
        blk[1] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + k * kQuantChunk + 32)), flip);
      }
      for (int h = 0; h < 2; ++h) {
        const __m256 scale = _mm256_set1_ps(_cvtsh_ss(w.scales[r * blocks + 2 * k + h]));
        const __m128i lo = _mm256_castsi256_si128(blk[h]), hi = _mm256_extracti128_si256(blk[h], 1);
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int p = 0; p < 4; ++p)
          _mm256_storeu_ps(to + 32 * h + 8 * p, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[p]))));
      }
    };
    for (int64_t k = 0; k < full; ++k) chunk(k, dst + k * kQuantChunk);
    if (full * kQuantChunk < w.cols) {  // the last, padded chunk
      chunk(full, tail.data());
      std::copy(tail.begin(), tail.begin() + (w.cols - full * kQuantChunk), dst + full * kQuantChunk);
    }
  }
}

bool matvec_avx2_supports() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return has;
}

void matvec_avx2(const MatrixView& w, const MatvecInput& in, int first, int count, float* y, int64_t ldy,
                   int64_t begin, int64_t end) {
  using Rows = void (*)(const MatrixView&, const MatvecInput&, int, float*, int64_t, int64_t, int64_t);
  static constexpr Rows kRows[] = {rows<1>, rows<2>, rows<3>, rows<4>, rows<5>, rows<6>, rows<7>, rows<8>};
  kRows[std::clamp(count, 1, 8) - 1](w, in, first, y, ldy, begin, end);
}

}  // namespace colossal::kernels::cpu::detail
