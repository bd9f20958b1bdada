// Formats, packing, input preparation, the scalar matvec (the reference) and the run-time choice.
#include "kernels/cpu/matvec.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/adamw.h"  // detail::float_to_bf16 / bf16_to_float
#include "kernels/cpu/kquants.h"

namespace colossal::kernels::cpu {
namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int32_t stored_offset(WeightFormat f) { return f == WeightFormat::kQ8 ? 128 : 8; }

std::atomic<int> g_matvec_choice{-1};  // -1 auto, 0 scalar, 1 avx512, 2 avx2

bool use_avx512(WeightFormat f) {
  int c = g_matvec_choice.load(std::memory_order_relaxed);
  return !is_kquant(f) && (c == -1 || c == 1) && detail::matvec_avx512_supports(f);
}

// K-quants have an AVX2 kernel only: it serves AVX-512 CPUs too (under "auto" and "avx512").
bool use_avx2(WeightFormat f) {
  int c = g_matvec_choice.load(std::memory_order_relaxed);
  if (is_kquant(f)) return c != 0 && detail::matvec_avx2_supports();
  return (c == 2 || (c == -1 && !detail::matvec_avx512_supports(f))) && detail::matvec_avx2_supports();
}

void check_kquant_columns(WeightFormat f, int64_t cols) {
  if (cols % kSuperBlock != 0)
    throw std::invalid_argument(std::string(to_string(f)) + " rows of " + std::to_string(cols) +
                                " columns (K-quant rows are whole super-blocks of 256)");
}

// Stored value of column c of a quantized row (the +offset form).
inline int stored_value(WeightFormat f, const uint8_t* row, int64_t c) {
  if (f == WeightFormat::kQ8) return row[c];
  const int64_t chunk = c / kQuantChunk, j = c % kQuantChunk;
  const uint8_t byte = row[chunk * (kQuantChunk / 2) + j % (kQuantChunk / 2)];
  return j < kQuantChunk / 2 ? (byte & 0x0F) : (byte >> 4);
}

void matvec_scalar(const MatrixView& w, const MatvecInput& in, float* y, int64_t ldy, int64_t begin,
                   int64_t end) {
  const int64_t cols = w.cols;
  if (is_kquant(w.format)) {
    const int64_t row_bytes = data_bytes(w.format, 1, cols);
    for (int64_t r = begin; r < end; ++r)
      for (int64_t i = 0; i < in.m; ++i)
        y[i * ldy + r] = kquant_dot(w.format, static_cast<const uint8_t*>(w.data) + r * row_bytes,
                                    in.q.data() + i * in.stride, in.block_scale.data() + i * (in.stride / kSuperBlock),
                                    in.group_sums.data() + i * (in.stride / 16), cols);
    return;
  }
  for (int64_t r = begin; r < end; ++r) {
    for (int64_t i = 0; i < in.m; ++i) {
      float acc = 0;
      switch (w.format) {
        case WeightFormat::kF32: {
          const float* wr = static_cast<const float*>(w.data) + r * cols;
          const float* x = in.f32 + i * in.stride;
          for (int64_t c = 0; c < cols; ++c) acc += wr[c] * x[c];
          break;
        }
        case WeightFormat::kBF16: {
          const uint16_t* wr = static_cast<const uint16_t*>(w.data) + r * cols;
          const uint16_t* x = in.bf16.data() + i * in.stride;
          for (int64_t c = 0; c < cols; ++c) acc += detail::bf16_to_float(wr[c]) * detail::bf16_to_float(x[c]);
          break;
        }
        case WeightFormat::kF16: {
          const uint16_t* wr = static_cast<const uint16_t*>(w.data) + r * cols;
          const float* x = in.f32 + i * in.stride;
          for (int64_t c = 0; c < cols; ++c) acc += half_to_float(wr[c]) * x[c];
          break;
        }
        default: {
          const int64_t stored = stored_cols(w.format, cols), blocks = stored / kQuantBlock;
          const auto* wr = static_cast<const uint8_t*>(w.data) + r * data_bytes(w.format, 1, cols);
          const int8_t* x = in.q.data() + i * in.stride;
          const int32_t offset = stored_offset(w.format);
          for (int64_t b = 0; b < blocks; ++b) {
            int32_t dot = 0;
            for (int64_t c = b * kQuantBlock; c < (b + 1) * kQuantBlock; ++c)
              dot += (stored_value(w.format, wr, c) - offset) * x[c];
            acc += half_to_float(w.scales[r * blocks + b]) * in.block_scale[i * blocks + b] * static_cast<float>(dot);
          }
          break;
        }
      }
      y[i * ldy + r] = acc;
    }
  }
}

}  // namespace

const char* to_string(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return "f32";
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kQ8: return "int8";
    case WeightFormat::kQ4: return "int4";
    case WeightFormat::kQ2K: return "q2_k";
    case WeightFormat::kQ3K: return "q3_k";
    case WeightFormat::kQ4K: return "q4_k";
    case WeightFormat::kQ5K: return "q5_k";
    case WeightFormat::kQ6K: return "q6_k";
    case WeightFormat::kF16: return "f16";
  }
  return "?";
}

WeightFormat weight_format(const std::string& name) {
  if (name == "f32" || name == "fp32" || name == "float32") return WeightFormat::kF32;
  if (name == "bf16" || name == "bfloat16") return WeightFormat::kBF16;
  if (name == "f16" || name == "fp16" || name == "float16") return WeightFormat::kF16;
  if (name == "int8" || name == "q8" || name == "q8_0") return WeightFormat::kQ8;
  if (name == "int4" || name == "q4" || name == "q4_0") return WeightFormat::kQ4;
  for (auto f : {WeightFormat::kQ2K, WeightFormat::kQ3K, WeightFormat::kQ4K, WeightFormat::kQ5K, WeightFormat::kQ6K})
    if (name == to_string(f)) return f;
  throw std::invalid_argument("unknown weight format '" + name + "' (known: fp32, bf16, fp16, int8, int4, and "
                              "q2_k .. q6_k as a GGUF file holds them)");
}

int64_t stored_cols(WeightFormat f, int64_t cols) { return is_quantized(f) ? round_up(cols, kQuantChunk) : cols; }

int64_t data_bytes(WeightFormat f, int64_t rows, int64_t cols) {
  switch (f) {
    case WeightFormat::kF32: return rows * cols * 4;
    case WeightFormat::kBF16:
    case WeightFormat::kF16: return rows * cols * 2;
    case WeightFormat::kQ8: return rows * stored_cols(f, cols);
    case WeightFormat::kQ4: return rows * stored_cols(f, cols) / 2;
    default: return rows * (cols / kSuperBlock) * kquant_block_bytes(f);
  }
}

int64_t scale_count(WeightFormat f, int64_t rows, int64_t cols) {
  return is_quantized(f) ? rows * stored_cols(f, cols) / kQuantBlock : 0;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  uint32_t bits = exp == 0x1F ? sign | 0x7F800000u | (mant << 13) : sign | ((exp + 112) << 23) | (mant << 13);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t a = x & 0x7FFFFFFF;
  if (a >= 0x7F800000) return sign | (a > 0x7F800000 ? 0x7E00 : 0x7C00);  // NaN, inf
  if (a >= 0x477FF000) return sign | 0x7C00;                              // rounds past 65504
  if (a < 0x38800000) {  // below 2^-14: a subnormal half, round(|f| * 2^24) to nearest even
    float v;
    std::memcpy(&v, &a, sizeof v);
    return sign | static_cast<uint16_t>(std::nearbyint(v * 16777216.0f));
  }
  uint32_t h = ((a >> 23) - 112) << 10 | ((a & 0x7FFFFF) >> 13);
  const uint32_t rest = a & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // a carry into the exponent is right
  return sign | static_cast<uint16_t>(h);
}

void pack_rows(const float* w, int64_t rows, int64_t cols, WeightFormat f, void* data, uint16_t* scales) {
  if (is_kquant(f))
    throw std::invalid_argument(std::string(to_string(f)) + " weights are kept as GGUF files hold them, not packed "
                                "here: use int8 or int4, or write a GGUF file (colossal export --outtype q4_k_m)");
  if (f == WeightFormat::kF32) {
    std::memcpy(data, w, static_cast<size_t>(rows * cols) * sizeof(float));
    return;
  }
  if (f == WeightFormat::kBF16 || f == WeightFormat::kF16) {
    auto* out = static_cast<uint16_t*>(data);
    for (int64_t i = 0; i < rows * cols; ++i)
      out[i] = f == WeightFormat::kF16 ? float_to_half(w[i]) : detail::float_to_bf16(w[i]);
    return;
  }
  const int64_t stored = stored_cols(f, cols), blocks = stored / kQuantBlock, row_bytes = data_bytes(f, 1, cols);
  auto* out = static_cast<uint8_t*>(data);
  std::vector<int> q(static_cast<size_t>(stored));
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = w + r * cols;
    auto at = [&](int64_t c) { return c < cols ? src[c] : 0.0f; };
    for (int64_t b = 0; b < blocks; ++b) {
      float amax = 0, extreme = 0;  // q4 keeps the sign of the largest magnitude (q4_0's rule)
      for (int64_t c = b * kQuantBlock; c < (b + 1) * kQuantBlock; ++c)
        if (std::fabs(at(c)) > amax) amax = std::fabs(at(c)), extreme = at(c);
      float d;
      if (f == WeightFormat::kQ8) {
        d = amax / 127.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        for (int64_t c = b * kQuantBlock; c < (b + 1) * kQuantBlock; ++c)
          q[c] = static_cast<int>(std::lround(at(c) * id)) + 128;
      } else {
        d = extreme / -8.0f;  // the extreme maps to -8, the full negative range
        const float id = d != 0 ? 1.0f / d : 0.0f;
        for (int64_t c = b * kQuantBlock; c < (b + 1) * kQuantBlock; ++c)
          q[c] = std::min(15, static_cast<int>(at(c) * id + 8.5f));
      }
      scales[r * blocks + b] = float_to_half(d);
    }
    uint8_t* dst = out + r * row_bytes;
    if (f == WeightFormat::kQ8) {
      for (int64_t c = 0; c < stored; ++c) dst[c] = static_cast<uint8_t>(q[c]);
    } else {
      for (int64_t chunk = 0; chunk < stored / kQuantChunk; ++chunk)
        for (int64_t j = 0; j < kQuantChunk / 2; ++j)
          dst[chunk * kQuantChunk / 2 + j] =
              static_cast<uint8_t>(q[chunk * kQuantChunk + j] | (q[chunk * kQuantChunk + j + kQuantChunk / 2] << 4));
    }
  }
}

void pack_ggml_rows(const uint8_t* blocks, int64_t rows, int64_t cols, WeightFormat f, void* data, uint16_t* scales) {
  if (!is_quantized(f) || cols % kQuantBlock != 0)
    throw std::invalid_argument(std::string("pack_ggml_rows: ") + to_string(f) + " rows of " + std::to_string(cols) +
                                " columns (expected int8 or int4 and whole blocks of 32)");
  const bool q4 = f == WeightFormat::kQ4;
  const int64_t src_block = q4 ? 18 : 34, src_blocks = cols / kQuantBlock;
  const int64_t stored = stored_cols(f, cols), blocks_per_row = stored / kQuantBlock, row_bytes = data_bytes(f, 1, cols);
  std::vector<uint8_t> q(static_cast<size_t>(stored));
  auto* out = static_cast<uint8_t*>(data);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = blocks + r * src_blocks * src_block;
    // Padding columns hold zero weights with a zero scale, as pack_rows stores them.
    std::fill(q.begin(), q.end(), static_cast<uint8_t>(q4 ? 8 : 128));
    for (int64_t b = 0; b < blocks_per_row; ++b) scales[r * blocks_per_row + b] = 0;
    for (int64_t b = 0; b < src_blocks; ++b) {
      const uint8_t* blk = src + b * src_block;
      uint16_t d;
      std::memcpy(&d, blk, 2);
      scales[r * blocks_per_row + b] = d;
      uint8_t* dst = q.data() + b * kQuantBlock;
      if (q4) {
        for (int64_t j = 0; j < kQuantBlock / 2; ++j) {
          dst[j] = blk[2 + j] & 0x0F;
          dst[j + kQuantBlock / 2] = blk[2 + j] >> 4;
        }
      } else {
        for (int64_t j = 0; j < kQuantBlock; ++j) dst[j] = static_cast<uint8_t>(static_cast<int8_t>(blk[2 + j]) + 128);
      }
    }
    uint8_t* row = out + r * row_bytes;
    if (!q4) {
      std::memcpy(row, q.data(), static_cast<size_t>(stored));
    } else {
      for (int64_t chunk = 0; chunk < stored / kQuantChunk; ++chunk)
        for (int64_t j = 0; j < kQuantChunk / 2; ++j)
          row[chunk * kQuantChunk / 2 + j] =
              static_cast<uint8_t>(q[chunk * kQuantChunk + j] | (q[chunk * kQuantChunk + j + kQuantChunk / 2] << 4));
    }
  }
}

void to_ggml_rows(const MatrixView& w, int64_t begin, int64_t end, uint8_t* blocks) {
  if (!is_quantized(w.format) || w.cols % kQuantBlock != 0)
    throw std::invalid_argument(std::string("to_ggml_rows: ") + to_string(w.format) + " rows of " +
                                std::to_string(w.cols) + " columns (expected int8 or int4 and whole blocks of 32)");
  const bool q4 = w.format == WeightFormat::kQ4;
  const int64_t block_bytes = q4 ? 18 : 34, src_blocks = w.cols / kQuantBlock;
  const int64_t stored_blocks = stored_cols(w.format, w.cols) / kQuantBlock;
  const int64_t row_bytes = data_bytes(w.format, 1, w.cols);
  const int32_t offset = stored_offset(w.format);
  for (int64_t r = begin; r < end; ++r) {
    const auto* row = static_cast<const uint8_t*>(w.data) + r * row_bytes;
    for (int64_t b = 0; b < src_blocks; ++b) {
      uint8_t* blk = blocks + ((r - begin) * src_blocks + b) * block_bytes;
      std::memcpy(blk, &w.scales[r * stored_blocks + b], 2);
      for (int64_t j = 0; j < (q4 ? kQuantBlock / 2 : kQuantBlock); ++j) {
        const int64_t c = b * kQuantBlock + j;
        blk[2 + j] = q4 ? static_cast<uint8_t>(stored_value(w.format, row, c) |
                                               stored_value(w.format, row, c + kQuantBlock / 2) << 4)
                        : static_cast<uint8_t>(static_cast<int8_t>(stored_value(w.format, row, c) - offset));
      }
    }
  }
}

void unpack_rows(const MatrixView& w, int64_t begin, int64_t end, float* out) {
  const int64_t cols = w.cols;
  const bool avx2_unpacks = is_quantized(w.format) || w.format == WeightFormat::kF16 || w.format == WeightFormat::kBF16;
  if (avx2_unpacks && g_matvec_choice.load(std::memory_order_relaxed) != 0 && detail::matvec_avx2_supports())
    return detail::unpack_rows_avx2(w, begin, end, out);
  for (int64_t r = begin; r < end; ++r) {
    float* dst = out + (r - begin) * cols;
    switch (w.format) {
      case WeightFormat::kF32:
        std::memcpy(dst, static_cast<const float*>(w.data) + r * cols, static_cast<size_t>(cols) * sizeof(float));
        break;
      case WeightFormat::kBF16: {
        const uint16_t* src = static_cast<const uint16_t*>(w.data) + r * cols;
        for (int64_t c = 0; c < cols; ++c) dst[c] = detail::bf16_to_float(src[c]);
        break;
      }
      case WeightFormat::kF16: {
        const uint16_t* src = static_cast<const uint16_t*>(w.data) + r * cols;
        for (int64_t c = 0; c < cols; ++c) dst[c] = half_to_float(src[c]);
        break;
      }
      case WeightFormat::kQ8:
      case WeightFormat::kQ4: {
        const int64_t blocks = stored_cols(w.format, cols) / kQuantBlock;
        const auto* row = static_cast<const uint8_t*>(w.data) + r * data_bytes(w.format, 1, cols);
        const int32_t offset = stored_offset(w.format);
        for (int64_t c = 0; c < cols; ++c)
          dst[c] = half_to_float(w.scales[r * blocks + c / kQuantBlock]) *
                   static_cast<float>(stored_value(w.format, row, c) - offset);
        break;
      }
      default:
        dequantize_kquant(w.format, static_cast<const uint8_t*>(w.data) + r * data_bytes(w.format, 1, cols), cols, dst);
        break;
    }
  }
}

void unpack_rows_bf16(const MatrixView& w, int64_t begin, int64_t end, uint16_t* out) {
  if (w.format == WeightFormat::kBF16) {
    std::memcpy(out, static_cast<const uint16_t*>(w.data) + begin * w.cols,
                static_cast<size_t>((end - begin) * w.cols) * sizeof(uint16_t));
    return;
  }
  if (is_quantized(w.format) && use_avx512(w.format) && detail::matvec_avx512_supports(WeightFormat::kBF16))
    return detail::unpack_rows_bf16_avx512(w, begin, end, out);
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = begin; r < end; ++r) {
    unpack_rows(w, r, r + 1, row.data());
    for (int64_t c = 0; c < w.cols; ++c) out[(r - begin) * w.cols + c] = detail::float_to_bf16(row[c]);
  }
}

void prepare_input(MatvecInput& in, WeightFormat f, const float* x, int64_t m, int64_t cols) {
  if (m < 1 || m > kMaxVectors)
    throw std::invalid_argument("matvec: " + std::to_string(m) + " input rows (expected 1.." +
                                std::to_string(kMaxVectors) + ")");
  in.format = f;
  in.m = m;
  in.cols = cols;
  switch (f) {
    case WeightFormat::kF32:
    case WeightFormat::kF16:  // the weights are widened, the input stays fp32
      in.stride = cols;
      in.f32 = x;
      return;
    case WeightFormat::kBF16:
      in.stride = round_up(cols, 32);
      in.bf16.assign(static_cast<size_t>(m * in.stride), 0);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t c = 0; c < cols; ++c) in.bf16[i * in.stride + c] = detail::float_to_bf16(x[i * cols + c]);
      return;
    case WeightFormat::kQ8:
    case WeightFormat::kQ4: break;
    default: {
      check_kquant_columns(f, cols);
      in.stride = cols;
      in.q.resize(static_cast<size_t>(m * cols));
      in.block_scale.resize(static_cast<size_t>(m * cols / kSuperBlock));
      in.group_sums.resize(static_cast<size_t>(m * cols / 16));
      for (int64_t i = 0; i < m; ++i)
        quantize_q8k(x + i * cols, cols, in.q.data() + i * cols, in.block_scale.data() + i * (cols / kSuperBlock),
                     in.group_sums.data() + i * (cols / 16));
      return;
    }
  }
  const int64_t stride = stored_cols(f, cols), blocks = stride / kQuantBlock, chunks = stride / kQuantChunk;
  in.stride = stride;
  in.q.resize(static_cast<size_t>(m * stride));
  in.block_scale.resize(static_cast<size_t>(m * blocks));
  in.lane_offset.resize(static_cast<size_t>(m * chunks * 16));
  const int32_t offset = stored_offset(f);
  if (use_avx512(f)) return detail::quantize_input_avx512(in, x, offset);
  in.block_offset.resize(static_cast<size_t>(m * blocks));
  for (int64_t i = 0; i < m; ++i) {
    const float* src = x + i * cols;
    int8_t* q = in.q.data() + i * stride;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t lo = b * kQuantBlock, hi = std::min(cols, lo + kQuantBlock);
      float amax = 0;
      for (int64_t c = lo; c < hi; ++c) amax = std::max(amax, std::fabs(src[c]));
      const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
      for (int64_t c = lo; c < lo + kQuantBlock; ++c)
        q[c] = c < hi ? static_cast<int8_t>(std::nearbyint(src[c] * id)) : int8_t{0};  // to even, as the vector path
      in.block_scale[i * blocks + b] = d;
    }
    for (int64_t k = 0; k < chunks; ++k)
      for (int lane = 0; lane < 16; ++lane) {
        const int64_t c0 = k * kQuantChunk + lane * 4;
        in.lane_offset[(i * chunks + k) * 16 + lane] = -offset * (q[c0] + q[c0 + 1] + q[c0 + 2] + q[c0 + 3]);
      }
    for (int64_t b = 0; b < blocks; ++b) {
      int32_t sum = 0;
      for (int64_t c = b * kQuantBlock; c < (b + 1) * kQuantBlock; ++c) sum += q[c];
      in.block_offset[i * blocks + b] = -offset * sum;
    }
  }
}

void matvec(const MatrixView& w, const MatvecInput& in, float* y, int64_t ldy, int64_t begin, int64_t end) {
  if (in.format != w.format || in.cols != w.cols)
    throw std::invalid_argument(std::string("matvec: input prepared for ") + to_string(in.format) + " with " +
                                std::to_string(in.cols) + " columns, weights are " + to_string(w.format) +
                                " with " + std::to_string(w.cols));
  const auto avx2 = is_kquant(w.format) ? detail::kquant_matvec_avx2 : detail::matvec_avx2;
  const auto kernel = use_avx512(w.format) ? detail::matvec_avx512 : use_avx2(w.format) ? avx2 : nullptr;
  if (!kernel) return matvec_scalar(w, in, y, ldy, begin, end);
  // Up to 8 inputs share each weight load; more go in groups of 8 over tiles of 16 rows, so the
  // second group reads the tile from cache instead of streaming the matrix again.
  constexpr int64_t kTileRows = 16;
  const int m = static_cast<int>(in.m);
  for (int64_t r0 = begin; r0 < end; r0 += kTileRows) {
    const int64_t r1 = std::min(end, r0 + kTileRows);
    for (int first = 0; first < m; first += detail::kVectorGroup)
      kernel(w, in, first, std::min(detail::kVectorGroup, m - first), y, ldy, r0, r1);
  }
}

float stream_sum(const float* p, int64_t n) {
  if (detail::matvec_avx512_supports(WeightFormat::kF32)) return detail::stream_sum_avx512(p, n);
  float acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] += p[i + l];
  float s = 0;
  for (; i < n; ++i) s += p[i];
  for (float a : acc) s += a;
  return s;
}

const char* matvec_implementation(WeightFormat f) {
  return use_avx512(f) ? "avx512" : use_avx2(f) ? "avx2" : "scalar";
}

std::string matvec_use(const std::string& name) {
  const int before = g_matvec_choice.load();
  std::string previous = before < 0 ? "auto" : before == 0 ? "scalar" : before == 1 ? "avx512" : "avx2";
  if (name == "auto") g_matvec_choice.store(-1);
  else if (name == "scalar") g_matvec_choice.store(0);
  else if (name == "avx512" && detail::matvec_avx512_supports(WeightFormat::kF32)) g_matvec_choice.store(1);
  else if (name == "avx2" && detail::matvec_avx2_supports()) g_matvec_choice.store(2);
  else throw std::invalid_argument("matvec_use: '" + name + "' is not one this CPU runs (scalar, avx2 or avx512 "
                                   "where the CPU has them, or auto)");
  return previous;
}

}  // namespace colossal::kernels::cpu
