#include "core/nn/quantized_weight.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>

#include "core/common/check.h"
#include "kernels/cpu/matvec.h"
#include "kernels/cpu/nf4.h"

namespace colossal::nn {
namespace {

namespace kc = kernels::cpu;

constexpr int64_t kAbsmaxBlock = 256;          // NF4 absmaxes per second-level scale
constexpr int64_t kPieceElements = 1 << 22;    // a dequantized piece: 16 MiB of fp32 at most

kc::WeightFormat matvec_format(QuantizedWeight::Format f) {
  return f == QuantizedWeight::Format::kInt8 ? kc::WeightFormat::kQ8 : kc::WeightFormat::kQ4;
}

}  // namespace

QuantizedWeight::Format QuantizedWeight::parse(const std::string& name) {
  if (name == "nf4") return Format::kNf4;
  if (name == "int8") return Format::kInt8;
  if (name == "int4") return Format::kInt4;
  COLOSSAL_FAIL("[qlora] base quantization '", name, "': expected nf4, int8 or int4");
}

const char* QuantizedWeight::name(Format f) {
  switch (f) {
    case Format::kNf4: return "nf4";
    case Format::kInt8: return "int8";
    case Format::kInt4: return "int4";
  }
  return "?";
}

const torch::Tensor& QuantizedWeight::dynamic_map() {
  // bitsandbytes' construction, in the same float arithmetic: for exponents 10^-6 .. 10^0, the
  // midpoints of linspace(0.1, 1, 2^i + 1) times the power, both signs; then 0 and 1; sorted.
  static const torch::Tensor map = [] {
    static const double kPowers[7] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0};
    std::vector<torch::Tensor> parts;
    for (int i = 0; i < 7; ++i) {
      auto b = torch::linspace(0.1, 1.0, (int64_t{1} << i) + 1, torch::kFloat32);
      auto means = (b.slice(0, 0, -1) + b.slice(0, 1)) / 2;
      parts.push_back(means * kPowers[i]);
      parts.push_back(means * -kPowers[i]);
    }
    parts.push_back(torch::tensor({0.0f, 1.0f}));
    return std::get<0>(torch::cat(parts).sort());
  }();
  return map;
}

QuantizedWeight::QuantizedWeight(const torch::Tensor& weight, Format format) : format_(format) {
  COLOSSAL_CHECK(weight.dim() == 2 && weight.is_floating_point(), "[qlora] quantize: expected a floating [out, in] ",
                 "weight, got ", weight.scalar_type(), " ", weight.sizes());
  COLOSSAL_CHECK(weight.device().is_cpu(), "[qlora] the quantized base runs on the CPU in this version (weight on ",
                 weight.device(), ")");
  rows_ = weight.size(0);
  cols_ = weight.size(1);
  COLOSSAL_CHECK(rows_ > 0 && cols_ > 0, "[qlora] quantize: empty weight ", weight.sizes());
  auto w = weight.detach().to(torch::kFloat32).contiguous();
  const float* src = w.data_ptr<float>();
  if (format == Format::kNf4) {
    const int64_t n = rows_ * cols_, blocks = (n + kc::kNf4Block - 1) / kc::kNf4Block;
    data_ = torch::empty({(n + 1) / 2}, torch::kUInt8);
    auto absmax = torch::empty({blocks}, torch::kFloat32);
    uint8_t* codes = data_.data_ptr<uint8_t>();
    float* am = absmax.data_ptr<float>();
    constexpr int64_t kPiece = 1 << 16;  // elements per task: whole blocks, an even count
    at::parallel_for(0, (n + kPiece - 1) / kPiece, 1, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const int64_t p0 = p * kPiece;
        kc::nf4_quantize(src + p0, std::min(kPiece, n - p0), codes + p0 / 2, am + p0 / kc::kNf4Block);
      }
    });
    // Double quantization: the absmaxes less their mean, 8 bits each, blockwise over 256.
    offset_ = absmax.mean().item<float>();
    auto centred = (absmax - offset_).contiguous();
    scales_ = torch::empty({blocks}, torch::kUInt8);
    absmax_scales_ = torch::empty({(blocks + kAbsmaxBlock - 1) / kAbsmaxBlock}, torch::kFloat32);
    kc::quantize_blockwise(centred.data_ptr<float>(), blocks, kAbsmaxBlock, dynamic_map().data_ptr<float>(), 256,
                           scales_.data_ptr<uint8_t>(), absmax_scales_.data_ptr<float>());
  } else {
    const auto f = matvec_format(format);
    data_ = torch::empty({kc::data_bytes(f, rows_, cols_)}, torch::kUInt8);
    scales_ = torch::empty({kc::scale_count(f, rows_, cols_)}, torch::kInt16);
    const int64_t bytes_per_row = kc::data_bytes(f, 1, cols_), scales_per_row = kc::scale_count(f, 1, cols_);
    at::parallel_for(0, rows_, 16, [&](int64_t b, int64_t e) {
      kc::pack_rows(src + b * cols_, e - b, cols_, f, data_.data_ptr<uint8_t>() + b * bytes_per_row,
                    reinterpret_cast<uint16_t*>(scales_.data_ptr<int16_t>()) + b * scales_per_row);
    });
  }
}

QuantizedWeight QuantizedWeight::from_nf4(int64_t rows, int64_t cols, torch::Tensor codes, torch::Tensor absmax_codes,
                                          torch::Tensor absmax_scales, float offset) {
  const int64_t n = rows * cols, blocks = (n + kc::kNf4Block - 1) / kc::kNf4Block;
  COLOSSAL_CHECK(rows > 0 && cols > 0 && codes.numel() == (n + 1) / 2 && absmax_codes.numel() == blocks &&
                     absmax_scales.numel() == (blocks + kAbsmaxBlock - 1) / kAbsmaxBlock,
                 "[qlora] NF4 pieces of a [", rows, ", ", cols, "] weight: expected ", (n + 1) / 2, " code bytes, ",
                 blocks, " absmax codes and ", (blocks + kAbsmaxBlock - 1) / kAbsmaxBlock, " scales; got ",
                 codes.numel(), ", ", absmax_codes.numel(), ", ", absmax_scales.numel());
  return from_parts(Format::kNf4, rows, cols, codes.to(torch::kUInt8).contiguous().reshape({-1}),
                    absmax_codes.to(torch::kUInt8).contiguous().reshape({-1}),
                    absmax_scales.to(torch::kFloat32).contiguous().reshape({-1}), offset);
}

QuantizedWeight QuantizedWeight::from_parts(Format format, int64_t rows, int64_t cols, torch::Tensor data,
                                            torch::Tensor scales, torch::Tensor absmax_scales, float offset) {
  QuantizedWeight w;
  w.format_ = format;
  w.rows_ = rows;
  w.cols_ = cols;
  w.data_ = std::move(data);
  w.scales_ = std::move(scales);
  w.absmax_scales_ = std::move(absmax_scales);
  w.offset_ = offset;
  return w;
}

bool QuantizedWeight::part_is_exact(Format format, int64_t cols, int64_t c0, int64_t c1) {
  if (format == Format::kNf4)  // blocks run over the flattened matrix: whole rows of whole blocks
    return cols % kc::kNf4Block == 0 && c0 % kc::kNf4Block == 0 && c1 % kc::kNf4Block == 0;
  return c0 % kc::kQuantBlock == 0 && (c1 % kc::kQuantBlock == 0 || c1 == cols);
}

QuantizedWeight QuantizedWeight::part_of(const torch::Tensor& full, Format format, int64_t r0, int64_t r1,
                                         int64_t c0, int64_t c1) {
  COLOSSAL_CHECK(full.dim() == 2 && 0 <= r0 && r0 < r1 && r1 <= full.size(0) && 0 <= c0 && c0 < c1 &&
                     c1 <= full.size(1),
                 "[qlora] part [", r0, ", ", r1, ") x [", c0, ", ", c1, ") of a weight ", full.sizes());
  COLOSSAL_CHECK(part_is_exact(format, full.size(1), c0, c1), "[qlora] columns [", c0, ", ", c1, ") of a ",
                 full.size(1), "-column weight do not fall on ", name(format), " block boundaries");
  if (format != Format::kNf4) return QuantizedWeight(full.slice(0, r0, r1).slice(1, c0, c1), format);
  const QuantizedWeight whole(full, format);
  const int64_t per_row = full.size(1) / kc::kNf4Block;
  auto absmax = torch::empty({whole.scales_.numel()}, torch::kFloat32);
  whole.decode_absmax(0, absmax.numel(), absmax.data_ptr<float>());
  // The part's blocks, row by row, as indices into the whole's.
  auto blocks = (torch::arange(r0, r1, torch::kLong).unsqueeze(1) * per_row +
                 torch::arange(c0 / kc::kNf4Block, c1 / kc::kNf4Block, torch::kLong).unsqueeze(0))
                    .reshape({-1});
  auto codes = whole.data_.view({-1, kc::kNf4Block / 2}).index_select(0, blocks).reshape({-1});
  return from_parts(Format::kNf4, r1 - r0, c1 - c0, codes, absmax.index_select(0, blocks), {}, 0.0f);
}

int64_t QuantizedWeight::bytes() const {
  auto size = [](const torch::Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; };
  return size(data_) + size(scales_) + size(absmax_scales_);
}

void QuantizedWeight::decode_absmax(int64_t first, int64_t last, float* out) const {
  if (!absmax_scales_.defined()) {  // a part cut by part_of: decoded already
    std::copy(scales_.data_ptr<float>() + first, scales_.data_ptr<float>() + last, out);
    return;
  }
  const float* map = dynamic_map().data_ptr<float>();
  const uint8_t* q = scales_.data_ptr<uint8_t>();
  const float* s = absmax_scales_.data_ptr<float>();
  for (int64_t b = first; b < last; ++b) {
    const float scaled = map[q[b]] * s[b / kAbsmaxBlock];  // two roundings, as bitsandbytes
    out[b - first] = scaled + offset_;
  }
}

void QuantizedWeight::dequantize_rows(int64_t begin, int64_t end, float* out) const {
  COLOSSAL_CHECK(defined() && 0 <= begin && begin <= end && end <= rows_, "[qlora] dequantize rows [", begin, ", ", end,
                 ") of ", rows_);
  if (begin == end) return;
  if (format_ == Format::kNf4) {
    const int64_t e0 = begin * cols_, e1 = end * cols_;
    const int64_t first = e0 / kc::kNf4Block, last = (e1 + kc::kNf4Block - 1) / kc::kNf4Block;
    std::vector<float> absmax(static_cast<size_t>(last - first));
    decode_absmax(first, last, absmax.data());
    kc::nf4_dequantize(data_.data_ptr<uint8_t>(), absmax.data(), e0, e1, out);
    return;
  }
  kc::MatrixView view{.format = matvec_format(format_),
                      .rows = rows_,
                      .cols = cols_,
                      .data = data_.data_ptr<uint8_t>(),
                      .scales = reinterpret_cast<const uint16_t*>(scales_.data_ptr<int16_t>())};
  kc::unpack_rows(view, begin, end, out);
}

torch::Tensor QuantizedWeight::dequantize() const {
  auto out = torch::empty({rows_, cols_}, torch::kFloat32);
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, rows_, 8, [&](int64_t b, int64_t e) { dequantize_rows(b, e, dst + b * cols_); });
  return out;
}

namespace {

// Calls fn(first_row, rows, piece) for consecutive pieces of w's rows, each dequantized (in
// parallel over its rows) into one reused buffer and converted to `dtype`.
template <class Fn>
void for_each_piece(const QuantizedWeight& w, c10::ScalarType dtype, Fn&& fn) {
  const int64_t rows = w.rows(), cols = w.cols();
  const int64_t piece = std::clamp<int64_t>(kPieceElements / cols, 1, rows);
  // One buffer per calling thread, kept between calls: a fresh 16 MiB allocation each time would
  // be mapped and faulted in anew by every layer's forward and backward.
  thread_local torch::Tensor storage;
  if (!storage.defined() || storage.numel() < piece * cols) storage = torch::empty({piece * cols}, torch::kFloat32);
  auto buffer = storage.narrow(0, 0, piece * cols).view({piece, cols});
  float* dst = buffer.data_ptr<float>();
  for (int64_t r0 = 0; r0 < rows; r0 += piece) {
    const int64_t n = std::min(piece, rows - r0);
    at::parallel_for(r0, r0 + n, 8, [&](int64_t b, int64_t e) { w.dequantize_rows(b, e, dst + (b - r0) * cols); });
    auto part = buffer.narrow(0, 0, n);
    fn(r0, n, dtype == torch::kFloat32 ? part : part.to(dtype));
  }
}

class QuantizedLinearFunction : public torch::autograd::Function<QuantizedLinearFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const QuantizedWeight& w) {
    // The pieces (shared storage, no copy) and the shape: the backward rebuilds the weight from them.
    auto& saved = ctx->saved_data;
    saved["format"] = static_cast<int64_t>(w.format());
    saved["rows"] = w.rows();
    saved["cols"] = w.cols();
    saved["data"] = w.data();
    saved["scales"] = w.scales();
    saved["absmax_scales"] = w.absmax_scales();
    saved["offset"] = static_cast<double>(w.absmax_offset());
    return apply_weight(x, w);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    auto& saved = ctx->saved_data;
    const auto weight = QuantizedWeight::from_parts(
        static_cast<QuantizedWeight::Format>(saved["format"].toInt()), saved["rows"].toInt(), saved["cols"].toInt(),
        saved["data"].toTensor(), saved["scales"].toTensor(), saved["absmax_scales"].toTensor(),
        static_cast<float>(saved["offset"].toDouble()));
    const auto* w = &weight;
    const auto& dy = grads[0];
    auto dy2 = dy.reshape({-1, w->rows()});
    torch::Tensor dx;
    for_each_piece(*w, dy.scalar_type(), [&](int64_t r0, int64_t n, const torch::Tensor& part) {
      auto term = dy2.narrow(1, r0, n);
      if (!dx.defined()) dx = torch::mm(term, part);
      else dx.addmm_(term, part);
    });
    auto shape = dy.sizes().vec();
    shape.back() = w->cols();
    return {dx.reshape(shape), torch::Tensor()};
  }

  static torch::Tensor apply_weight(const torch::Tensor& x, const QuantizedWeight& w) {
    auto x2 = x.reshape({-1, w.cols()});
    auto y = torch::empty({x2.size(0), w.rows()}, x.options());
    for_each_piece(w, x.scalar_type(), [&](int64_t r0, int64_t n, const torch::Tensor& part) {
      if (n == w.rows()) y = torch::mm(x2, part.t());
      else y.narrow(1, r0, n).copy_(torch::mm(x2, part.t()));
    });
    auto shape = x.sizes().vec();
    shape.back() = w.rows();
    return y.reshape(shape);
  }
};

}  // namespace

torch::Tensor quantized_linear(const torch::Tensor& x, const QuantizedWeight& w) {
  COLOSSAL_CHECK(w.defined(), "[qlora] quantized_linear: no weight");
  COLOSSAL_CHECK(x.size(-1) == w.cols(), "[qlora] quantized_linear: input has ", x.size(-1), " features, the weight ",
                 w.cols());
  COLOSSAL_CHECK(x.device().is_cpu(), "[qlora] the quantized base runs on the CPU in this version (input on ",
                 x.device(), ")");
  return QuantizedLinearFunction::apply(x, w);
}

}  // namespace colossal::nn
