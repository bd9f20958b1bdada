#pragma once
// The tensor face of kernels/cuda: shape and dtype checks, LibTorch's current stream, and
// outputs allocated by its caching allocator. The autograd functions in core/nn and the
// optimizers call these for CUDA tensors (and the CPU kernels for CPU tensors). Every check names
// the op and what it expected.
#include <ATen/core/Tensor.h>

#include <tuple>
#include <vector>

#include "kernels/cuda/adamw.h"

namespace colossal::cuda {

/// Whether the CUDA kernels are in this build and a GPU is visible.
bool kernels_usable();

/// y and rstd [rows] (fp32) of RMSNorm over the last dimension; x contiguous, weight [dim], same dtype.
std::tuple<at::Tensor, at::Tensor> rms_norm_forward(const at::Tensor& x, const at::Tensor& weight, double eps);
/// (grad_x, grad_weight).
std::tuple<at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor& grad_y, const at::Tensor& x,
                                                     const at::Tensor& weight, const at::Tensor& rstd);

/// x [B, T, H, D] rotated at positions [T] (int64) with fp32 tables [P, D] on x's device;
/// `backward` applies the transposed rotation (for the gradient).
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& positions,
                bool backward);

/// silu(gate) * up for [.., F] tensors of one dtype (either may be a column slice of a wider row).
at::Tensor swiglu_forward(const at::Tensor& gate, const at::Tensor& up);
/// (grad_gate, grad_up).
std::tuple<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& grad_y, const at::Tensor& gate,
                                                   const at::Tensor& up);

/// Per-row loss [rows] (fp32) of logits [rows, V]; with `gradient_scale` (a one-element fp32 tensor
/// on the device) defined, the logits are overwritten by gradient_scale * (softmax - one_hot).
at::Tensor cross_entropy_rows(const at::Tensor& logits, const at::Tensor& target, int64_t ignore_index,
                              const at::Tensor& gradient_scale);

/// Decode attention through the paged cache (kernels/cuda/paged_attention.h): q, out [tokens,
/// heads, D], cache [blocks, block_size, kv_heads, D], all one dtype; metadata int32 on the device.
/// `max_context`: the largest of token_context, which sets how the positions are split over
/// blocks; 0 reads it from the device (one synchronisation).
void paged_attention(const at::Tensor& q, const at::Tensor& out, const at::Tensor& k_cache, const at::Tensor& v_cache,
                     const at::Tensor& block_tables, const at::Tensor& token_seq, const at::Tensor& token_context,
                     double scale, int64_t max_context = 0);

/// One launch over every entry (pointers into tensors on `device`); the table goes to the device
/// through pinned memory on the current stream.
void adamw_multi_tensor(std::vector<kernels::cuda::AdamWTensor> table, const c10::Device& device);

}  // namespace colossal::cuda
