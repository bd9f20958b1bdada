#include "core/inference/packed_linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstring>

#include "core/common/check.h"
#include "kernels/cpu/kquants.h"
#include "kernels/cpu/prefill_gemm.h"

namespace colossal::inference {

namespace kc = kernels::cpu;

namespace {
constexpr int64_t kRowGrain = 16;  // rows per task at least: a few KiB of weights

// Whether the CPU multiplies bf16 natively (AVX512-BF16); without it the prefill GEMM runs in fp32.
bool native_bf16_gemm() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}
}  // namespace

PackedLinear::PackedLinear(const at::Tensor& weight, WeightFormat format) : format_(format) {
  COLOSSAL_CHECK(weight.dim() == 2 && weight.is_floating_point(), "[inference] a linear weight must be a 2-d float "
                 "tensor, got ", weight.sizes(), " ", weight.scalar_type());
  out_ = weight.size(0);
  in_ = weight.size(1);
  COLOSSAL_CHECK(!kc::is_kquant(format), "[inference] ", kc::to_string(format), " weights come only from GGUF "
                 "files: use int8 or int4, or write one (colossal export --gguf F --outtype q4_k_m) and load it");
  auto w = weight.detach();
  if (format == WeightFormat::kF32) {
    data_ = w.to(at::kFloat).contiguous();
    return;
  }
  if (format == WeightFormat::kBF16 || format == WeightFormat::kF16) {
    data_ = w.to(format == WeightFormat::kF16 ? at::kHalf : at::kBFloat16).contiguous();
    return;
  }
  auto f32 = w.to(at::kFloat).contiguous();
  data_ = at::empty({kc::data_bytes(format, out_, in_)}, at::kByte);
  scales_ = at::empty({kc::scale_count(format, out_, in_)}, at::kShort);
  const int64_t row_bytes = kc::data_bytes(format, 1, in_), row_scales = kc::scale_count(format, 1, in_);
  auto* data = data_.data_ptr<uint8_t>();
  auto* scales = reinterpret_cast<uint16_t*>(scales_.data_ptr<int16_t>());
  const float* src = f32.data_ptr<float>();
  at::parallel_for(0, out_, kRowGrain, [&](int64_t b, int64_t e) {
    kc::pack_rows(src + b * in_, e - b, in_, format, data + b * row_bytes, scales + b * row_scales);
  });
}

PackedLinear::PackedLinear(WeightFormat format, int64_t out_features, int64_t in_features, at::Tensor data,
                           at::Tensor scales)
    : format_(format), out_(out_features), in_(in_features), data_(std::move(data)), scales_(std::move(scales)) {
  const auto expect_type = format == WeightFormat::kF32    ? at::kFloat
                           : format == WeightFormat::kBF16 ? at::kBFloat16
                           : format == WeightFormat::kF16  ? at::kHalf
                                                           : at::kByte;
  if (kc::is_kquant(format))
    COLOSSAL_CHECK(in_ % kc::kSuperBlock == 0, "[inference] a ", kc::to_string(format), " weight [", out_, ", ", in_,
                   "]: K-quant rows are whole super-blocks of 256 columns");
  const int64_t expect_numel = kc::is_byte_format(format) ? kc::data_bytes(format, out_, in_) : out_ * in_;
  COLOSSAL_CHECK(data_.scalar_type() == expect_type && data_.numel() == expect_numel && data_.is_contiguous(),
                 "[inference] packed ", kc::to_string(format), " weight [", out_, ", ", in_, "]: expected ",
                 expect_numel, " contiguous ", expect_type, " values, got ", data_.numel(), " ", data_.scalar_type());
  if (kc::is_quantized(format))
    COLOSSAL_CHECK(scales_.defined() && scales_.scalar_type() == at::kShort &&
                       scales_.numel() == kc::scale_count(format, out_, in_),
                   "[inference] packed ", kc::to_string(format), " weight [", out_, ", ", in_, "]: expected ",
                   kc::scale_count(format, out_, in_), " fp16 scales, got ",
                   scales_.defined() ? scales_.numel() : 0);
}

PackedLinear PackedLinear::from_ggml_blocks(WeightFormat format, int64_t out_features, int64_t in_features,
                                           const uint8_t* blocks) {
  if (format == WeightFormat::kF16 || format == WeightFormat::kBF16) {  // ggml's f16/bf16 rows are ours
    auto data = at::empty({out_features, in_features}, format == WeightFormat::kF16 ? at::kHalf : at::kBFloat16);
    std::memcpy(data.data_ptr(), blocks, static_cast<size_t>(data.nbytes()));
    return PackedLinear(format, out_features, in_features, data, at::Tensor());
  }
  if (kc::is_kquant(format)) {
    COLOSSAL_CHECK(in_features % kc::kSuperBlock == 0, "[inference] ggml blocks: ", kc::to_string(format), " [",
                   out_features, ", ", in_features, "] (K-quant rows are whole super-blocks of 256)");
    auto data = at::empty({kc::data_bytes(format, out_features, in_features)}, at::kByte);
    std::memcpy(data.data_ptr<uint8_t>(), blocks, static_cast<size_t>(data.numel()));
    return PackedLinear(format, out_features, in_features, data, at::Tensor());
  }
  COLOSSAL_CHECK(kc::is_quantized(format) && in_features % kc::kQuantBlock == 0, "[inference] ggml blocks: ",
                 kc::to_string(format), " [", out_features, ", ", in_features,
                 "] (expected int8 or int4 rows of whole 32-value blocks)");
  auto data = at::empty({kc::data_bytes(format, out_features, in_features)}, at::kByte);
  auto scales = at::empty({kc::scale_count(format, out_features, in_features)}, at::kShort);
  const int64_t src_row = in_features / kc::kQuantBlock * (format == WeightFormat::kQ8 ? 34 : 18);
  const int64_t row_bytes = kc::data_bytes(format, 1, in_features), row_scales = kc::scale_count(format, 1, in_features);
  auto* d = data.data_ptr<uint8_t>();
  auto* sc = reinterpret_cast<uint16_t*>(scales.data_ptr<int16_t>());
  at::parallel_for(0, out_features, kRowGrain, [&](int64_t b, int64_t e) {
    kc::pack_ggml_rows(blocks + b * src_row, e - b, in_features, format, d + b * row_bytes, sc + b * row_scales);
  });
  return PackedLinear(format, out_features, in_features, data, scales);
}

PackedLinear PackedLinear::concat_rows(const std::vector<PackedLinear>& parts) {
  COLOSSAL_CHECK(!parts.empty(), "[inference] concat_rows of nothing");
  bool one_format = true;
  for (const auto& p : parts) one_format = one_format && !p.mixed() && p.format() == parts[0].format();
  if (!one_format) {
    // Neighbouring parts in one format are joined (one pass over the input per format run: Q4_K_M's
    // q and k together, v apart), the runs kept side by side.
    std::vector<PackedLinear> flat;
    for (const auto& p : parts) {
      COLOSSAL_CHECK(p.in_features() == parts[0].in_features(), "[inference] concat_rows: a part of ",
                     p.in_features(), " columns after ", parts[0].in_features());
      for (const auto& q : p.mixed() ? p.parts() : std::vector<PackedLinear>{p}) flat.push_back(q);
    }
    PackedLinear m;
    m.format_ = flat[0].format();
    m.in_ = flat[0].in_features();
    for (size_t begin = 0; begin < flat.size();) {
      size_t end = begin + 1;
      while (end < flat.size() && flat[end].format() == flat[begin].format()) ++end;
      const std::vector<PackedLinear> run(flat.begin() + static_cast<std::ptrdiff_t>(begin),
                                          flat.begin() + static_cast<std::ptrdiff_t>(end));
      m.parts_.push_back(run.size() == 1 ? run[0] : concat_rows(run));
      m.out_ += m.parts_.back().out_features();
      begin = end;
    }
    return m;
  }
  std::vector<at::Tensor> data, scales;
  int64_t out = 0;
  for (const auto& p : parts) {
    COLOSSAL_CHECK(p.format() == parts[0].format() && p.in_features() == parts[0].in_features(),
                   "[inference] concat_rows: a ", kc::to_string(p.format()), " [", p.out_features(), ", ",
                   p.in_features(), "] part after ", kc::to_string(parts[0].format()), " [", parts[0].out_features(),
                   ", ", parts[0].in_features(), "]");
    data.push_back(p.data().reshape({p.out_features(), -1}));
    if (p.scales().defined()) scales.push_back(p.scales().reshape({p.out_features(), -1}));
    out += p.out_features();
  }
  auto d = at::cat(data, 0).contiguous();
  d = kc::is_byte_format(parts[0].format()) ? d.reshape({-1}) : d;
  return PackedLinear(parts[0].format(), out, parts[0].in_features(), d,
                      scales.empty() ? at::Tensor() : at::cat(scales, 0).reshape({-1}));
}

PackedLinear PackedLinear::permute_rows(const std::vector<int64_t>& order) const {
  COLOSSAL_CHECK(static_cast<int64_t>(order.size()) == out_, "[inference] permute_rows: ", order.size(),
                 " indices for ", out_, " rows");
  COLOSSAL_CHECK(!mixed(), "[inference] permute_rows of a matrix in mixed formats");
  auto index = at::tensor(order, at::kLong);
  auto d = data_.reshape({out_, -1}).index_select(0, index);
  d = kc::is_byte_format(format_) ? d.reshape({-1}) : d;
  return PackedLinear(format_, out_, in_, d.contiguous(),
                      scales_.defined() ? scales_.reshape({out_, -1}).index_select(0, index).reshape({-1}) : at::Tensor());
}

int64_t PackedLinear::bytes() const {
  if (mixed()) {
    int64_t sum = 0;
    for (const auto& p : parts_) sum += p.bytes();
    return sum;
  }
  return kc::data_bytes(format_, out_, in_) + 2 * kc::scale_count(format_, out_, in_);
}

kc::MatrixView PackedLinear::view() const {
  COLOSSAL_CHECK(!mixed(), "[inference] a matrix in mixed formats has no single view");
  return {format_, out_, in_, data_.const_data_ptr(),
          scales_.defined() ? reinterpret_cast<const uint16_t*>(scales_.const_data_ptr<int16_t>()) : nullptr};
}

void PackedLinear::forward_into(const float* x, int64_t n, float* y, int64_t ldy) const {
  if (n == 0) return;  // e.g. an expert no token was routed to
  if (mixed()) {
    int64_t offset = 0;
    for (const auto& p : parts_) {
      p.forward_into(x, n, y + offset, ldy);
      offset += p.out_features();
    }
    return;
  }
  const auto v = view();
  // The integer GEMM where the CPU runs it and it beats the matvec at this many tokens (int8/int4
  // from 4: batched decode too); otherwise the matvec up to kMatvecTokens.
  const bool integer_gemm = !native_bf16_gemm() && kc::prefill_gemm_supports(format_) &&
                            n >= kc::prefill_gemm_min_tokens(format_);
  if (n <= kMatvecTokens && !integer_gemm) {
    // The calling thread prepares the input once, its buffers reused between calls; the workers
    // read that thread's copy (a thread_local named inside the lambda would be their own).
    thread_local kc::MatvecInput prepared_here;
    const kc::MatvecInput& in = prepared_here;
    kc::prepare_input(prepared_here, format_, x, n, in_);
    at::parallel_for(0, out_, kRowGrain, [&](int64_t b, int64_t e) { kc::matvec(v, in, y, ldy, b, e); });
    return;
  }
  if (integer_gemm) {
    // No bf16 hardware: the prompt multiplies in integers (kernels/cpu/prefill_gemm.h), the tokens
    // quantized once and each thread rebuilding its 8-row panels of the weights as it goes.
    thread_local kc::PrefillInput prepared_here;
    kc::PrefillInput& in = prepared_here;
    kc::prepare_prefill_input(in, format_, n, in_);
    at::parallel_for(0, n, 16, [&](int64_t b, int64_t e) { kc::quantize_prefill_rows(in, x, b, e); });
    const int64_t panels = (out_ + kc::kPanelRows - 1) / kc::kPanelRows;
    at::parallel_for(0, panels, 1, [&](int64_t b, int64_t e) {
      kc::prefill_gemm(v, in, y, ldy, b * kc::kPanelRows, std::min(e * kc::kPanelRows, out_));
    });
    return;
  }
  auto xt = at::from_blob(const_cast<float*>(x), {n, in_}, at::kFloat);
  auto yt = at::from_blob(y, {n, out_}, {ldy, 1}, at::kFloat);
  if (format_ == WeightFormat::kF32) {
    yt.copy_(at::mm(xt, data_.t()));
    return;
  }
  // f16 is widened exactly to fp32 (bf16 would round it); bf16 and quantized weights take the bf16
  // GEMM where the CPU has one.
  if (native_bf16_gemm() && format_ != WeightFormat::kF16) {
    if (format_ == WeightFormat::kBF16) {
      yt.copy_(at::mm(xt.to(at::kBFloat16), data_.t()));
      return;
    }
    // Quantized: unpacked to bf16 into a buffer the thread keeps, then one bf16 GEMM.
    thread_local at::Tensor scratch;
    if (!scratch.defined() || scratch.numel() < out_ * in_) scratch = at::empty({out_ * in_}, at::kBFloat16);
    auto* dst = reinterpret_cast<uint16_t*>(scratch.data_ptr());  // (a plain pointer: the workers use it)
    at::parallel_for(0, out_, kRowGrain, [&](int64_t b, int64_t e) { kc::unpack_rows_bf16(v, b, e, dst + b * in_); });
    auto w = scratch.narrow(0, 0, out_ * in_).view({out_, in_});
    yt.copy_(at::mm(xt.to(at::kBFloat16), w.t()));
    return;
  }
  // No bf16 hardware (or f16 weights): the weights unpacked to fp32, then ATen's fp32 GEMM.
  thread_local at::Tensor scratch32;
  if (!scratch32.defined() || scratch32.numel() < out_ * in_) scratch32 = at::empty({out_ * in_}, at::kFloat);
  float* dst = scratch32.data_ptr<float>();
  at::parallel_for(0, out_, kRowGrain, [&](int64_t b, int64_t e) { kc::unpack_rows(v, b, e, dst + b * in_); });
  yt.copy_(at::mm(xt, scratch32.narrow(0, 0, out_ * in_).view({out_, in_}).t()));
}

at::Tensor PackedLinear::forward(const at::Tensor& x) const {
  COLOSSAL_CHECK(x.dim() == 2 && x.size(1) == in_, "[inference] linear input: expected [n, ", in_, "], got ", x.sizes());
  auto xf = x.to(at::kFloat).contiguous();
  auto y = at::empty({xf.size(0), out_}, at::kFloat);
  forward_into(xf.data_ptr<float>(), xf.size(0), y.data_ptr<float>(), out_);
  return y;
}

at::Tensor PackedLinear::rows(const at::Tensor& ids) const {
  COLOSSAL_CHECK(!mixed(), "[inference] row lookup in a matrix of mixed formats");
  if (!kc::is_byte_format(format_)) return data_.index_select(0, ids).to(at::kFloat);
  auto idx = ids.to(at::kLong).contiguous();
  auto out = at::empty({idx.numel(), in_}, at::kFloat);
  const auto v = view();
  const int64_t* p = idx.data_ptr<int64_t>();
  for (int64_t i = 0; i < idx.numel(); ++i) {
    COLOSSAL_CHECK(p[i] >= 0 && p[i] < out_, "[inference] row ", p[i], " outside [0, ", out_, ")");
    kc::unpack_rows(v, p[i], p[i] + 1, out.data_ptr<float>() + i * in_);
  }
  return out;
}

at::Tensor PackedLinear::unpacked() const {
  if (mixed()) {
    std::vector<at::Tensor> rows;
    for (const auto& p : parts_) rows.push_back(p.unpacked());
    return at::cat(rows, 0);
  }
  if (!kc::is_byte_format(format_)) return data_.to(at::kFloat);
  auto out = at::empty({out_, in_}, at::kFloat);
  const auto v = view();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, out_, kRowGrain, [&](int64_t b, int64_t e) { kc::unpack_rows(v, b, e, dst + b * in_); });
  return out;
}

}  // namespace colossal::inference
