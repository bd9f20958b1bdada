#include "core/cuda/ops.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <cstring>

#include "core/common/check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/swiglu.h"

namespace colossal::cuda {
namespace {

namespace kc = colossal::kernels::cuda;

kc::DType dtype_of(const at::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case at::kFloat: return kc::DType::f32;
    case at::kBFloat16: return kc::DType::bf16;
    case at::kHalf: return kc::DType::f16;
    default: COLOSSAL_FAIL("[cuda] ", op, ": expected fp32, bf16 or fp16, got ", t.scalar_type());
  }
}

void check_cuda(const at::Tensor& t, const at::Tensor& like, const char* op, const char* what) {
  COLOSSAL_CHECK(t.defined() && t.device() == like.device(), "[cuda] ", op, ": ", what, " must be on ", like.device(),
                 t.defined() ? ", found on " + t.device().str() : std::string(", found nothing"));
}

void check_dtype(const at::Tensor& t, at::ScalarType want, const char* op, const char* what) {
  COLOSSAL_CHECK(t.scalar_type() == want, "[cuda] ", op, ": ", what, " must be ", want, ", got ", t.scalar_type());
}

void* stream_for(const at::Tensor& t) { return current_stream(t.device()); }

}  // namespace

bool kernels_usable() { return kc::built() && torch::cuda::is_available(); }

std::tuple<at::Tensor, at::Tensor> rms_norm_forward(const at::Tensor& x_in, const at::Tensor& weight, double eps) {
  const char* op = "rms_norm";
  COLOSSAL_CHECK(x_in.is_cuda(), "[cuda] ", op, ": expected a CUDA tensor, got one on ", x_in.device());
  check_cuda(weight, x_in, op, "weight");
  check_dtype(weight, x_in.scalar_type(), op, "weight");
  const int64_t dim = x_in.size(-1);
  COLOSSAL_CHECK(weight.dim() == 1 && weight.size(0) == dim, "[cuda] ", op, ": weight must be [", dim, "], got ",
                 weight.sizes());
  auto x = x_in.contiguous();
  auto w = weight.contiguous();
  auto y = at::empty_like(x);
  const int64_t rows = dim == 0 ? 0 : x.numel() / dim;
  auto rstd = at::empty({rows}, x.options().dtype(at::kFloat));
  kc::rms_norm_forward({rows, dim, dtype_of(x, op)}, x.const_data_ptr(), w.const_data_ptr(), static_cast<float>(eps),
                       y.mutable_data_ptr(), rstd.mutable_data_ptr<float>(), stream_for(x));
  return {y, rstd};
}

std::tuple<at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor& grad_y, const at::Tensor& x,
                                                     const at::Tensor& weight, const at::Tensor& rstd) {
  const char* op = "rms_norm backward";
  auto gy = grad_y.contiguous().to(x.scalar_type());
  auto w = weight.contiguous();
  const int64_t dim = x.size(-1), rows = x.numel() / dim;
  const kc::RmsNormShape shape{rows, dim, dtype_of(x, op)};
  auto gx = at::empty_like(x);
  auto gw = at::empty_like(w);
  auto workspace = at::empty({std::max<int64_t>(1, kc::rms_norm_backward_workspace(shape))},
                             x.options().dtype(at::kFloat));
  kc::rms_norm_backward(shape, gy.const_data_ptr(), x.const_data_ptr(), w.const_data_ptr(),
                        rstd.const_data_ptr<float>(), gx.mutable_data_ptr(), gw.mutable_data_ptr(),
                        workspace.mutable_data_ptr<float>(), stream_for(x));
  return {gx, gw};
}

at::Tensor rope(const at::Tensor& x_in, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& positions,
                bool backward) {
  const char* op = "rope";
  COLOSSAL_CHECK(x_in.dim() == 4, "[cuda] ", op, ": expected x [B, T, H, D], got ", x_in.sizes());
  check_cuda(cos, x_in, op, "the cos table");
  check_cuda(sin, x_in, op, "the sin table");
  check_cuda(positions, x_in, op, "positions");
  check_dtype(cos, at::kFloat, op, "the cos table");
  check_dtype(sin, at::kFloat, op, "the sin table");
  check_dtype(positions, at::kLong, op, "positions");
  const int64_t B = x_in.size(0), T = x_in.size(1), H = x_in.size(2), D = x_in.size(3);
  COLOSSAL_CHECK(positions.dim() == 1 && positions.size(0) == T, "[cuda] ", op, ": expected positions [", T, "], got ",
                 positions.sizes());
  COLOSSAL_CHECK(cos.dim() == 2 && cos.size(1) == D && sin.sizes() == cos.sizes(), "[cuda] ", op,
                 ": expected tables [positions, ", D, "], got ", cos.sizes(), " and ", sin.sizes());
  auto x = x_in.contiguous();
  auto y = at::empty_like(x);
  auto pos = positions.contiguous();
  kc::rope({B * T, H, D, dtype_of(x, op), T}, x.const_data_ptr(), cos.contiguous().const_data_ptr<float>(),
           sin.contiguous().const_data_ptr<float>(), pos.const_data_ptr<int64_t>(), y.mutable_data_ptr(), backward,
           stream_for(x));
  return y;
}

namespace {
// A [.., F] operand as rows with a stride: contiguous, or a column slice of contiguous rows.
std::pair<at::Tensor, int64_t> as_rows(const at::Tensor& t) {
  const int64_t f = t.size(-1);
  if (t.dim() >= 1 && t.stride(-1) == 1) {
    // Rows evenly spaced: every dimension but the last collapses into one stride.
    bool even = true;
    int64_t expect = t.dim() >= 2 ? t.stride(-2) : f;
    for (int64_t d = t.dim() - 2; d >= 0; --d) {
      if (t.size(d) != 1 && t.stride(d) != expect) even = false;
      expect *= t.size(d);
    }
    if (even && (t.dim() < 2 || t.stride(-2) >= f)) return {t, t.dim() >= 2 ? t.stride(-2) : f};
  }
  return {t.contiguous(), f};
}
}  // namespace

at::Tensor swiglu_forward(const at::Tensor& gate, const at::Tensor& up) {
  const char* op = "swiglu";
  check_cuda(up, gate, op, "up");
  check_dtype(up, gate.scalar_type(), op, "up");
  COLOSSAL_CHECK(gate.sizes() == up.sizes(), "[cuda] ", op, ": gate ", gate.sizes(), " and up ", up.sizes(), " differ");
  auto [g, gs] = as_rows(gate);
  auto [u, us] = as_rows(up);
  auto y = at::empty(gate.sizes(), gate.options().memory_format(at::MemoryFormat::Contiguous));
  const int64_t f = gate.size(-1), rows = f == 0 ? 0 : gate.numel() / f;
  kc::swiglu_forward({rows, f, gs, us, dtype_of(gate, op)}, g.const_data_ptr(), u.const_data_ptr(), y.mutable_data_ptr(),
                     stream_for(gate));
  return y;
}

std::tuple<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& grad_y, const at::Tensor& gate,
                                                   const at::Tensor& up) {
  const char* op = "swiglu backward";
  auto gy = grad_y.contiguous().to(gate.scalar_type());
  auto [g, gs] = as_rows(gate);
  auto [u, us] = as_rows(up);
  auto opts = gate.options().memory_format(at::MemoryFormat::Contiguous);
  auto dg = at::empty(gate.sizes(), opts), du = at::empty(gate.sizes(), opts);
  const int64_t f = gate.size(-1), rows = f == 0 ? 0 : gate.numel() / f;
  kc::swiglu_backward({rows, f, gs, us, dtype_of(gate, op)}, gy.const_data_ptr(), g.const_data_ptr(),
                      u.const_data_ptr(), dg.mutable_data_ptr(), du.mutable_data_ptr(), stream_for(gate));
  return {dg, du};
}

at::Tensor cross_entropy_rows(const at::Tensor& logits, const at::Tensor& target, int64_t ignore_index,
                              const at::Tensor& gradient_scale) {
  const char* op = "cross_entropy_rows";
  COLOSSAL_CHECK(logits.dim() == 2 && logits.stride(1) == 1, "[cuda] ", op, ": expected logits [rows, V] with unit column stride, got ",
                 logits.sizes());
  check_cuda(target, logits, op, "target");
  check_dtype(target, at::kLong, op, "target");
  COLOSSAL_CHECK(target.dim() == 1 && target.size(0) == logits.size(0), "[cuda] ", op, ": expected target [",
                 logits.size(0), "], got ", target.sizes());
  auto t = target.contiguous();
  auto loss = at::empty({logits.size(0)}, logits.options().dtype(at::kFloat));
  kc::CrossEntropyRows a;
  a.rows = logits.size(0);
  a.vocab = logits.size(1);
  a.row_stride = logits.size(0) > 1 ? logits.stride(0) : logits.size(1);
  a.target = t.const_data_ptr<int64_t>();
  a.ignore_index = ignore_index;
  a.loss = loss.mutable_data_ptr<float>();
  a.write_gradient = gradient_scale.defined();
  if (a.write_gradient) {
    check_cuda(gradient_scale, logits, op, "gradient_scale");
    check_dtype(gradient_scale, at::kFloat, op, "gradient_scale");
    a.gradient_scale = gradient_scale.const_data_ptr<float>();
  }
  a.dtype = dtype_of(logits, op);
  kc::cross_entropy_rows(logits.mutable_data_ptr(), a, stream_for(logits));
  return loss;
}

void paged_attention(const at::Tensor& q, const at::Tensor& out, const at::Tensor& k_cache, const at::Tensor& v_cache,
                     const at::Tensor& block_tables, const at::Tensor& token_seq, const at::Tensor& token_context,
                     double scale, int64_t max_context) {
  const char* op = "paged_attention";
  COLOSSAL_CHECK(q.dim() == 3 && q.is_contiguous() && out.is_contiguous() && out.sizes() == q.sizes(), "[cuda] ", op,
                 ": expected contiguous q and out [tokens, heads, D], got ", q.sizes(), " and ", out.sizes());
  COLOSSAL_CHECK(k_cache.dim() == 4 && k_cache.is_contiguous() && v_cache.is_contiguous() &&
                     v_cache.sizes() == k_cache.sizes() && k_cache.size(3) == q.size(2),
                 "[cuda] ", op, ": expected caches [blocks, block_size, kv_heads, ", q.size(2), "], got ",
                 k_cache.sizes(), " and ", v_cache.sizes());
  for (const at::Tensor* t : {&out, &k_cache, &v_cache}) check_dtype(*t, q.scalar_type(), op, "out and the cache");
  for (const at::Tensor* t : {&out, &k_cache, &v_cache, &block_tables, &token_seq, &token_context})
    check_cuda(*t, q, op, "every operand");
  for (const at::Tensor* t : {&block_tables, &token_seq, &token_context}) {
    check_dtype(*t, at::kInt, op, "the attention metadata");
    COLOSSAL_CHECK(t->is_contiguous(), "[cuda] ", op, ": the attention metadata must be contiguous");
  }
  kc::PagedAttentionArgs a;
  a.q = q.const_data_ptr();
  a.out = out.mutable_data_ptr();
  a.k_cache = k_cache.const_data_ptr();
  a.v_cache = v_cache.const_data_ptr();
  a.dtype = dtype_of(q, op);
  a.heads = q.size(1);
  a.kv_heads = k_cache.size(2);
  a.head_dim = q.size(2);
  a.block_size = k_cache.size(1);
  a.block_tables = block_tables.const_data_ptr<int32_t>();
  a.max_blocks = block_tables.size(1);
  a.token_seq = token_seq.const_data_ptr<int32_t>();
  a.token_context = token_context.const_data_ptr<int32_t>();
  a.scale = static_cast<float>(scale);
  a.tokens = q.size(0);
  if (a.tokens == 0) return;
  a.max_context = max_context > 0 ? max_context : token_context.max().item<int32_t>();
  at::Tensor workspace;
  if (const int64_t floats = kc::paged_attention_workspace(a); floats > 0) {
    workspace = at::empty({floats}, q.options().dtype(at::kFloat));
    a.workspace = workspace.mutable_data_ptr<float>();
  }
  kc::paged_attention(a, stream_for(q));
}

void adamw_multi_tensor(std::vector<kernels::cuda::AdamWTensor> table, const c10::Device& device) {
  if (table.empty()) return;
  const int64_t chunks = kc::adamw_plan(table.data(), static_cast<int>(table.size()));
  const auto bytes = static_cast<int64_t>(table.size() * sizeof(kc::AdamWTensor));
  // Pinned staging: the copy is asynchronous on the current stream, and the caching host
  // allocator keeps the buffer until that copy has run.
  auto host = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  std::memcpy(host.mutable_data_ptr(), table.data(), static_cast<size_t>(bytes));
  auto on_device = host.to(device, /*non_blocking=*/true);
  kc::adamw_multi_tensor(static_cast<const kc::AdamWTensor*>(on_device.const_data_ptr()),
                         static_cast<int>(table.size()), chunks, current_stream(device));
}

}  // namespace colossal::cuda
