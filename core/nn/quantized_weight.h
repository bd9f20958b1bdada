#pragma once
// A frozen linear weight kept in 4 or 8 bits for QLoRA (Dettmers et al., 2023): the base of a
// LoRA run stored small, dequantized a block of rows at a time inside the forward and the
// backward (never whole, never saved for backward), while the adapters train in fp32/bf16.
//
//   nf4   QLoRA's NormalFloat 4-bit, blocks of 64, with double quantization: each block's absmax
//         in 8 bits (bitsandbytes' signed dynamic map, blocks of 256 absmaxes with an fp32 scale
//         each, after subtracting their mean), as bitsandbytes' quantize_4bit(quant_type="nf4",
//         compress_statistics=True) lays it out: about 4.13 bits per weight
//   int8  our q8 (llama.cpp q8_0 arithmetic: symmetric, an fp16 scale per 32): 8.5 bits
//   int4  our q4 (q4_0 arithmetic): 4.5 bits
//
// quantized_linear(x, w) = x W^T with W dequantized in pieces of rows (forward: into the output
// columns they produce; backward: dX accumulated piece by piece); no gradient reaches W.
#include <torch/types.h>

#include <string>

namespace colossal::nn {

class QuantizedWeight {
 public:
  enum class Format { kNf4, kInt8, kInt4 };
  /// "nf4", "int8" or "int4"; throws naming anything else.
  static Format parse(const std::string& name);
  static const char* name(Format f);

  QuantizedWeight() = default;
  /// Quantizes `w` [rows, cols] (any floating dtype, CPU).
  QuantizedWeight(const torch::Tensor& w, Format format);

  bool defined() const { return rows_ > 0; }
  Format format() const { return format_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  /// Bytes held (values and every level of scales).
  int64_t bytes() const;

  /// Rows [begin, end) as fp32 into out [(end - begin), cols].
  void dequantize_rows(int64_t begin, int64_t end, float* out) const;
  /// The whole weight as fp32 [rows, cols].
  torch::Tensor dequantize() const;

  // NF4's stored pieces, as bitsandbytes names them (tests compare them with bitsandbytes):
  // codes uint8 [ceil(n / 2)], absmax_codes uint8 [n / 64 blocks], absmax_scales fp32 [per 256
  // blocks], absmax_offset (their mean). from_nf4 rebuilds a weight from pieces quantized there.
  const torch::Tensor& nf4_codes() const { return data_; }
  const torch::Tensor& nf4_absmax_codes() const { return scales_; }
  const torch::Tensor& nf4_absmax_scales() const { return absmax_scales_; }
  float nf4_absmax_offset() const { return offset_; }
  static QuantizedWeight from_nf4(int64_t rows, int64_t cols, torch::Tensor codes, torch::Tensor absmax_codes,
                                  torch::Tensor absmax_scales, float offset);
  /// A weight from the pieces another one holds (data(), scales(), absmax_scales(), offset()).
  static QuantizedWeight from_parts(Format format, int64_t rows, int64_t cols, torch::Tensor data,
                                    torch::Tensor scales, torch::Tensor absmax_scales, float offset);
  const torch::Tensor& data() const { return data_; }
  const torch::Tensor& scales() const { return scales_; }
  /// bitsandbytes' signed 8-bit dynamic map (create_dynamic_map(signed=True)), ascending, 256 values.
  static const torch::Tensor& dynamic_map();

 private:
  /// Each NF4 block's absmax decoded (code2[q] * scale + offset), fp32.
  void decode_absmax(int64_t first_block, int64_t last_block, float* out) const;

  Format format_ = Format::kNf4;
  int64_t rows_ = 0, cols_ = 0;
  torch::Tensor data_;    // nf4: packed codes; int8/int4: matvec's stored rows
  torch::Tensor scales_;  // nf4: 8-bit absmax codes; int8/int4: fp16 scales (int16 bits)
  torch::Tensor absmax_scales_;
  float offset_ = 0;
};

/// y = x W^T for x [..., cols] (fp32 or bf16; y in x's dtype). Backward gives x its gradient
/// (dY W, W dequantized again piece by piece) and W none.
torch::Tensor quantized_linear(const torch::Tensor& x, const QuantizedWeight& w);

}  // namespace colossal::nn
