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

  // The stored pieces. nf4 (as bitsandbytes names them; tests compare them with bitsandbytes):
  // data() the codes uint8 [ceil(n / 2)], scales() the absmax codes uint8 [n / 64 blocks],
  // absmax_scales() fp32 [per 256 blocks], absmax_offset() their mean; or, for a part cut from a
  // larger weight (part_of), scales() the decoded absmax fp32 and absmax_scales() undefined.
  // int8/int4: data() matvec's stored rows, scales() their fp16 scales (int16 bits).
  const torch::Tensor& data() const { return data_; }
  const torch::Tensor& scales() const { return scales_; }
  const torch::Tensor& absmax_scales() const { return absmax_scales_; }
  float absmax_offset() const { return offset_; }
  /// An NF4 weight from pieces quantized by bitsandbytes (double-quantized absmax).
  static QuantizedWeight from_nf4(int64_t rows, int64_t cols, torch::Tensor codes, torch::Tensor absmax_codes,
                                  torch::Tensor absmax_scales, float offset);
  /// A weight from the pieces another one holds (data(), scales(), absmax_scales(), absmax_offset()).
  static QuantizedWeight from_parts(Format format, int64_t rows, int64_t cols, torch::Tensor data,
                                    torch::Tensor scales, torch::Tensor absmax_scales, float offset);

  /// Rows [r0, r1) x columns [c0, c1) of `full` stored as quantizing the whole of `full` stores
  /// them: a tensor-parallel rank's slice whose values equal one process's element for element.
  /// Needs the part's blocks to be whole blocks of the full matrix (part_is_exact): nf4 then keeps
  /// the double-quantized absmax decoded (fp32, 4.5 bits per weight instead of 4.13); int8/int4
  /// blocks lie within rows, so the part is quantized on its own.
  static QuantizedWeight part_of(const torch::Tensor& full, Format format, int64_t r0, int64_t r1, int64_t c0,
                                 int64_t c1);
  /// Whether columns [c0, c1) of a `cols`-wide matrix cut along `format`'s block boundaries.
  static bool part_is_exact(Format format, int64_t cols, int64_t c0, int64_t c1);

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
