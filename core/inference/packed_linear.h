#pragma once
// A linear layer's weight [out, in] kept in the format generation reads fastest (fp32, bf16, or
// int8/int4 with per-block scales: kernels/cpu/matvec.h) and multiplied two ways:
//  * a few tokens (decode: one per sequence): the matvec kernel, rows split across ATen's threads,
//    streaming the weight once for up to kMaxVectors tokens;
//  * many tokens (prefill): one GEMM — fp32 weights through ATen's fp32 product; int8, int4 and
//    K-quants in integers over int8 tokens where the CPU has AVX2 but no bf16 units
//    (kernels/cpu/prefill_gemm: 1.7x the fp32 GEMM over the unpacked weights on Zen 3); otherwise
//    unpacked (in parallel, into a reused buffer) to bf16 and multiplied in bf16 where the CPU has
//    bf16 dot products (AVX512-BF16), or to fp32 and multiplied in fp32 (f16 weights, and CPUs
//    without AVX2: an emulated bf16 GEMM runs several times slower than fp32).
// Inputs and outputs are fp32 [n, features]; no allocation per call once buffers have grown.
// GGUF files mix formats within what we fuse (Q4_K_M keeps some value projections in Q6_K): such
// a matrix keeps its parts, each in its own format, and multiplies them one after another.
#include <ATen/core/Tensor.h>

#include <vector>

#include "kernels/cpu/matvec.h"

namespace colossal::inference {

using kernels::cpu::WeightFormat;

class PackedLinear {
 public:
  PackedLinear() = default;
  /// Packs `weight` [out, in] (any floating dtype) in `format`.
  PackedLinear(const at::Tensor& weight, WeightFormat format);
  /// Already packed storage (a quantized checkpoint): data as stored, scales as fp16 bits (int16).
  PackedLinear(WeightFormat format, int64_t out_features, int64_t in_features, at::Tensor data, at::Tensor scales);

  /// llama.cpp's q8_0/q4_0 blocks of a [out, in] matrix (in a multiple of 32) as kQ8/kQ4, exactly;
  /// K-quant blocks (in a multiple of 256) and f16/bf16 rows copied as they are.
  static PackedLinear from_ggml_blocks(WeightFormat format, int64_t out_features, int64_t in_features,
                                       const uint8_t* blocks);
  /// The rows of `parts` one after another (the same in_features): fused matrices. Parts in
  /// different formats are kept apart (mixed()), neighbours in one format joined.
  static PackedLinear concat_rows(const std::vector<PackedLinear>& parts);
  /// Row i of the result is row order[i] of this one (no conversion: any format).
  PackedLinear permute_rows(const std::vector<int64_t>& order) const;

  bool defined() const { return data_.defined() || !parts_.empty(); }
  /// The format (of the first part, for a mixed matrix).
  WeightFormat format() const { return format_; }
  /// Rows in more than one format (a fused GGUF matrix): view(), data() and scales() are not
  /// available, parts() are.
  bool mixed() const { return !parts_.empty(); }
  const std::vector<PackedLinear>& parts() const { return parts_; }
  int64_t out_features() const { return out_; }
  int64_t in_features() const { return in_; }
  /// Bytes a full product reads (values and scales).
  int64_t bytes() const;
  const at::Tensor& data() const { return data_; }
  const at::Tensor& scales() const { return scales_; }
  kernels::cpu::MatrixView view() const;

  /// y [n, out] fp32 = x [n, in] (fp32, contiguous) W^T.
  at::Tensor forward(const at::Tensor& x) const;
  /// The same into y (fp32, [n, out], rows ldy apart).
  void forward_into(const float* x, int64_t n, float* y, int64_t ldy) const;
  /// Rows `ids` of the weight as fp32 [ids, in]: an embedding lookup in any format.
  at::Tensor rows(const at::Tensor& ids) const;
  /// The whole weight as fp32 [out, in].
  at::Tensor unpacked() const;

  /// Token counts up to this take the matvec path (one pass over the weight), more take the GEMM
  /// (int8/int4 on AVX2 CPUs without bf16 units: the integer GEMM from kernels::cpu::prefill_gemm_min_tokens).
  static constexpr int64_t kMatvecTokens = kernels::cpu::kMaxVectors;

 private:
  WeightFormat format_ = WeightFormat::kF32;
  int64_t out_ = 0, in_ = 0;
  at::Tensor data_, scales_;
  std::vector<PackedLinear> parts_;  // mixed formats only
};

}  // namespace colossal::inference
