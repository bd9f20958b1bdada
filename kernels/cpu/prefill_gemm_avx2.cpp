// The prefill GEMM on AVX2 (compiled with -mavx2 -mfma -mf16c; chosen at run time): see
// kernels/cpu/prefill_gemm.h for the layout. Per 4 columns of a panel, one 32-byte load of the
// weights (8 rows x 4 bytes) and, per token, a broadcast of its 4 activations; maddubs multiplies
// the unsigned weights by the signed activations and adds neighbours into int16, and a few steps'
// int16 sums are added before one madd widens them to int32 (as many as cannot overflow: a pair
// is at most 2 x 63 x 127 = 16002 for 6-bit weights, 2 x 15 x 127 = 3810 for 4-bit). int8
// weights are signed: maddubs gets |w| and the activations with w's sign, one madd per step. Per
// group, the int32 sums become fp32 once: acc += (scale x token scale) sums - offset x (token
// scale x the token's sum over the group).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/kquants.h"
#include "kernels/cpu/kquants_scales.h"
#include "kernels/cpu/prefill_gemm.h"

namespace colossal::kernels::cpu::detail {
namespace prefill_avx2 {

struct Panel {
  std::vector<uint8_t> rows;  // [8][cols]: each row's q in column order
  std::vector<uint8_t> q;     // [cols / 4][8][4]
  std::vector<float> scale, offset;  // [cols / group][8]
};

inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline void store32(uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
// Bit `shift` .. of every byte of h, `bits` wide, moved to bits 4 and up (Q5_K's fifth bit, Q6_K's
// top two): 16-bit shifts, the mask keeping each byte's own bits.
inline __m256i high_bits(__m256i h, int shift, int bits) {
  const __m256i mask = _mm256_set1_epi8(static_cast<char>((1 << bits) - 1));
  return _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(shift)), mask), 4);
}

// The 256 unsigned values of one super-block in column order (unpack_superblock's q): Q4_K, Q5_K
// and Q6_K with 32-byte operations, the rarer Q2_K/Q3_K through the portable unpacking.
void kquant_values(WeightFormat f, const uint8_t* b, uint8_t* q) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  switch (f) {
    case WeightFormat::kQ4K:
    case WeightFormat::kQ5K: {
      // Chunk c of 64: the low nibbles of qs[32c ..] then the high ones; Q5_K's fifth bits are
      // bits 2c and 2c + 1 of qh.
      const uint8_t* qs = f == WeightFormat::kQ4K ? b + 16 : b + 48;
      const __m256i qh = load32(b + 16);
      for (int c = 0; c < 4; ++c) {
        const __m256i v = load32(qs + 32 * c);
        __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
        if (f == WeightFormat::kQ5K) {
          lo = _mm256_or_si256(lo, high_bits(qh, 2 * c, 1));
          hi = _mm256_or_si256(hi, high_bits(qh, 2 * c + 1, 1));
        }
        store32(q + 64 * c, lo);
        store32(q + 64 * c + 32, hi);
      }
      return;
    }
    case WeightFormat::kQ6K:
      // Half n of 128: ql[64n ..] low nibbles then high nibbles, two bits each from qh[32n ..].
      for (int n = 0; n < 2; ++n) {
        const __m256i l0 = load32(b + 64 * n), l1 = load32(b + 64 * n + 32), h = load32(b + 128 + 32 * n);
        uint8_t* out = q + 128 * n;
        store32(out, _mm256_or_si256(_mm256_and_si256(l0, low), high_bits(h, 0, 2)));
        store32(out + 32, _mm256_or_si256(_mm256_and_si256(l1, low), high_bits(h, 2, 2)));
        store32(out + 64, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low), high_bits(h, 4, 2)));
        store32(out + 96, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low), high_bits(h, 6, 2)));
      }
      return;
    default: {
      SuperBlock sb;
      unpack_superblock(f, b, sb);
      std::memcpy(q, sb.q, kSuperBlock);
    }
  }
}

// Row r of w as bytes q (column order) and per-group scale/offset (stride 8 between groups).
void decode_row(const MatrixView& w, int64_t r, int64_t cols, int64_t group, uint8_t* q, float* scale, float* offset) {
  switch (w.format) {
    case WeightFormat::kQ8: {
      // Stored int8 + 128: xor 0x80 gives the signed value's bits.
      const uint8_t* src = static_cast<const uint8_t*>(w.data) + r * cols;
      for (int64_t c = 0; c < cols; c += 32) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + c));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + c), _mm256_xor_si256(v, _mm256_set1_epi8(-128)));
      }
      const uint16_t* s = w.scales + r * (cols / kQuantBlock);
      for (int64_t b = 0; b < cols / kQuantBlock; ++b) scale[8 * b] = _cvtsh_ss(s[b]), offset[8 * b] = 0;
      return;
    }
    case WeightFormat::kQ4: {
      // Per 64 columns, 32 bytes: column j in byte j's low nibble, column j + 32 in its high one.
      const uint8_t* src = static_cast<const uint8_t*>(w.data) + r * (cols / 2);
      const __m256i low = _mm256_set1_epi8(0x0F);
      for (int64_t c = 0; c < cols; c += 64) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + c / 2));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + c), _mm256_and_si256(v, low));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + c + 32), _mm256_and_si256(_mm256_srli_epi16(v, 4), low));
      }
      const uint16_t* s = w.scales + r * (cols / kQuantBlock);
      for (int64_t b = 0; b < cols / kQuantBlock; ++b) {
        scale[8 * b] = _cvtsh_ss(s[b]);
        offset[8 * b] = 8.0f * scale[8 * b];  // stored value + 8
      }
      return;
    }
    default: {  // K-quants: llama.cpp's w = (d scale_j) q - dm min_j per 16
      const int64_t bytes = kquant_block_bytes(w.format), blocks = cols / kSuperBlock;
      const uint8_t* src = static_cast<const uint8_t*>(w.data) + r * blocks * bytes;
      for (int64_t b = 0; b < blocks; ++b) {
        SuperBlockScales sc;
        kquant_unpack_scales(w.format, src + b * bytes, sc);
        kquant_values(w.format, src + b * bytes, q + b * kSuperBlock);
        // Per 32 (Q4_K, Q5_K: the two 16s of a 32 share it) or per 16.
        const int per = static_cast<int>(kSuperBlock / group), step = 16 / per;
        for (int j = 0; j < per; ++j) {
          scale[8 * (per * b + j)] = sc.d * static_cast<float>(sc.scale[step * j]);
          offset[8 * (per * b + j)] = sc.dm * static_cast<float>(sc.min[step * j]);
        }
      }
    }
  }
}

// Rows [r0, r0 + count) of w into the panel (rows past count: zero weights, scales and offsets).
void build_panel(const MatrixView& w, const PrefillInput& in, int64_t r0, int count, Panel& p) {
  const int64_t cols = in.cols, groups = cols / in.group;
  p.rows.resize(static_cast<size_t>(kPanelRows * cols));
  p.q.resize(static_cast<size_t>(kPanelRows * cols));
  p.scale.assign(static_cast<size_t>(kPanelRows * groups), 0.0f);
  p.offset.assign(static_cast<size_t>(kPanelRows * groups), 0.0f);
  for (int r = 0; r < kPanelRows; ++r) {
    uint8_t* q = p.rows.data() + r * cols;
    if (r < count) decode_row(w, r0 + r, cols, in.group, q, p.scale.data() + r, p.offset.data() + r);
    else std::memset(q, 0, static_cast<size_t>(cols));
  }
  // 8 x 8 transposes of 32-bit words: word k of every row's 32 columns becomes vector k.
  for (int64_t c = 0; c < cols; c += 32) {
    __m256 v[8];
    for (int r = 0; r < 8; ++r) v[r] = _mm256_loadu_ps(reinterpret_cast<const float*>(p.rows.data() + r * cols + c));
    __m256 t[8], u[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);
    }
    for (int h = 0; h < 2; ++h) {  // rows 0-3, then 4-7
      u[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
      u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
      u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
      u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
    }
    float* dst = reinterpret_cast<float*>(p.q.data() + c * kPanelRows);
    for (int k = 0; k < 4; ++k) {
      _mm256_storeu_ps(dst + 8 * k, _mm256_permute2f128_ps(u[k], u[4 + k], 0x20));
      _mm256_storeu_ps(dst + 8 * (k + 4), _mm256_permute2f128_ps(u[k], u[4 + k], 0x31));
    }
  }
}

inline __m256i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Tile `index` (4 tokens) against the panel: out[t * 8 + row]. kSpan 4-column steps of int16 sums
// per madd. The offsets' term first, in its own loop: the main loop then keeps its accumulators,
// sums and weights in registers (with it, GCC spilled them).
template <bool kSigned, int kGroup, int kSpan>
void tile(const Panel& p, const PrefillInput& in, int64_t index, float* out) {
  constexpr int kSteps = kGroup / 4, T = PrefillInput::kTile;
  static_assert(kSteps % kSpan == 0);
  const int64_t cols = in.cols, groups = cols / kGroup, blocks = cols / kQuantBlock;
  const int8_t* x = in.q.data() + index * cols * T;       // column k, token t: x[4 k + 4 t]
  const float* xs = in.scale.data() + index * blocks * T;  // block b, token t: xs[4 b + t]
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  if constexpr (!kSigned) {  // (groups is even: two chains of multiply-adds, not one latency-bound)
    const float* xg = in.group_sum.data() + index * groups * T;
    __m256 odd[T];
    for (int t = 0; t < T; ++t) odd[t] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; g += 2) {
      const __m256 ov = _mm256_loadu_ps(p.offset.data() + g * kPanelRows);
      const __m256 ov1 = _mm256_loadu_ps(p.offset.data() + (g + 1) * kPanelRows);
      for (int t = 0; t < T; ++t) {
        acc[t] = _mm256_fnmadd_ps(ov, _mm256_set1_ps(xg[g * T + t]), acc[t]);
        odd[t] = _mm256_fnmadd_ps(ov1, _mm256_set1_ps(xg[(g + 1) * T + t]), odd[t]);
      }
    }
    for (int t = 0; t < T; ++t) acc[t] = _mm256_add_ps(acc[t], odd[t]);
  }
  const __m256i ones = _mm256_set1_epi16(1);
  const uint8_t* wq = p.q.data();
  for (int64_t g = 0; g < groups; ++g) {
    __m256i isum[T];
    for (int s0 = 0; s0 < kSteps; s0 += kSpan) {
      __m256i part[T];
      for (int st = 0; st < kSpan; ++st) {
        const int64_t k = g * kGroup + 4 * (s0 + st);
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + k * kPanelRows));
        const int8_t* xk = x + k * T;
        if constexpr (kSigned) {
          const __m256i aw = _mm256_abs_epi8(wv);
          for (int t = 0; t < T; ++t) {
            const __m256i prod = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(broadcast4(xk + 4 * t), wv));
            part[t] = st == 0 ? prod : _mm256_add_epi16(part[t], prod);
          }
        } else {
          for (int t = 0; t < T; ++t) {
            const __m256i prod = _mm256_maddubs_epi16(wv, broadcast4(xk + 4 * t));
            part[t] = st == 0 ? prod : _mm256_add_epi16(part[t], prod);
          }
        }
      }
      for (int t = 0; t < T; ++t) {
        const __m256i wide = _mm256_madd_epi16(part[t], ones);
        isum[t] = s0 == 0 ? wide : _mm256_add_epi32(isum[t], wide);
      }
    }
    const __m256 sv = _mm256_loadu_ps(p.scale.data() + g * kPanelRows);
    const float* xsb = xs + (g * kGroup / kQuantBlock) * T;
    for (int t = 0; t < T; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(sv, _mm256_set1_ps(xsb[t])), acc[t]);
  }
  for (int t = 0; t < T; ++t) _mm256_storeu_ps(out + 8 * t, acc[t]);
}

template <bool kSigned, int kGroup, int kSpan>
void tiles(const Panel& p, const PrefillInput& in, float* y, int64_t ldy, int64_t r0, int count) {
  constexpr int64_t T = PrefillInput::kTile;
  alignas(32) float out[T * kPanelRows];
  for (int64_t index = 0; index < in.tiles(); ++index) {
    tile<kSigned, kGroup, kSpan>(p, in, index, out);
    const int64_t n = std::min(T, in.n - index * T);  // the last tile's padding tokens are not stored
    for (int64_t t = 0; t < n; ++t) std::memcpy(y + (index * T + t) * ldy + r0, out + 8 * t, sizeof(float) * count);
  }
}

}  // namespace prefill_avx2

void quantize_prefill_rows_avx2(PrefillInput& in, const float* x, int64_t begin, int64_t end) {
  constexpr int64_t kTile = PrefillInput::kTile;
  const int64_t cols = in.cols, logical = in.logical_cols, blocks = cols / kQuantBlock, groups = cols / in.group;
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // packs' lane interleave undone
  alignas(32) float padded[kQuantBlock];
  alignas(32) int32_t words[8];
  for (int64_t i = begin; i < end; ++i) {
    const int64_t tile = i / kTile, slot = i % kTile;
    int8_t* tq = in.q.data() + tile * cols * kTile + slot * 4;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t c0 = b * kQuantBlock;
      const float* src = x + i * logical + c0;
      if (c0 + kQuantBlock > logical) {  // the block past x's own columns: zeros
        std::fill(padded, padded + kQuantBlock, 0.0f);
        if (logical > c0) std::copy(src, src + (logical - c0), padded);
        src = padded;
      }
      __m256 v[4], amax = _mm256_setzero_ps();
      for (int k = 0; k < 4; ++k) {
        v[k] = _mm256_loadu_ps(src + 8 * k);
        amax = _mm256_max_ps(amax, _mm256_and_ps(v[k], magnitude));
      }
      __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
      m = _mm_max_ps(m, _mm_movehl_ps(m, m));
      m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
      const float top = _mm_cvtss_f32(m), d = top / 127.0f, inv = top > 0 ? 127.0f / top : 0.0f;
      __m256i q[4];
      for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], _mm256_set1_ps(inv)));  // to even
      // Sums of each 16 (int32 lanes, then across).
      const __m256i s0 = _mm256_add_epi32(q[0], q[1]), s1 = _mm256_add_epi32(q[2], q[3]);
      const __m256i s01 = _mm256_hadd_epi32(s0, s1);  // [s0 pairs | s1 pairs] per 128-bit lane
      const __m256i s4 = _mm256_hadd_epi32(s01, s01);
      const int32_t sum0 = _mm256_extract_epi32(s4, 0) + _mm256_extract_epi32(s4, 4);
      const int32_t sum1 = _mm256_extract_epi32(s4, 1) + _mm256_extract_epi32(s4, 5);
      const __m256i bytes = _mm256_permutevar8x32_epi32(
          _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])), order);
      _mm256_store_si256(reinterpret_cast<__m256i*>(words), bytes);
      for (int j = 0; j < 8; ++j) std::memcpy(tq + (c0 + 4 * j) * kTile, &words[j], 4);
      in.scale[static_cast<size_t>((tile * blocks + b) * kTile + slot)] = d;
      float* gs = in.group_sum.data() + (tile * groups + b * (kQuantBlock / in.group)) * kTile + slot;
      if (in.group == kQuantBlock) gs[0] = d * static_cast<float>(sum0 + sum1);
      else gs[0] = d * static_cast<float>(sum0), gs[kTile] = d * static_cast<float>(sum1);
    }
  }
}

void prefill_gemm_avx2(const MatrixView& w, const PrefillInput& in, float* y, int64_t ldy, int64_t begin,
                       int64_t end) {
  using namespace prefill_avx2;
  thread_local Panel panel;
  for (int64_t r0 = begin; r0 < end; r0 += kPanelRows) {
    const int count = static_cast<int>(std::min<int64_t>(kPanelRows, end - r0));
    build_panel(w, in, r0, count, panel);
    switch (w.format) {
      case WeightFormat::kQ8: tiles<true, 32, 1>(panel, in, y, ldy, r0, count); break;
      case WeightFormat::kQ4: tiles<false, 32, 8>(panel, in, y, ldy, r0, count); break;  // 8 x 3810 < 32767
      case WeightFormat::kQ4K: tiles<false, 32, 8>(panel, in, y, ldy, r0, count); break;  // 8 x 3810
      case WeightFormat::kQ5K: tiles<false, 32, 4>(panel, in, y, ldy, r0, count); break;  // 4 x 7874
      case WeightFormat::kQ6K: tiles<false, 16, 2>(panel, in, y, ldy, r0, count); break;  // 2 x 16002
      default: tiles<false, 16, 4>(panel, in, y, ldy, r0, count);  // Q3_K, Q2_K: 4 x 1778 at most
    }
  }
}

}  // namespace colossal::kernels::cpu::detail
