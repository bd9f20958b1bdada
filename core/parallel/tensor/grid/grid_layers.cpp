#include "core/parallel/tensor/grid/grid_layers.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include <limits>

#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/parallel/autograd_group.h"
#include "core/parallel/fp8_payload.h"
#include "core/parallel/gather_along.h"
#include "core/parallel/tensor/comm_ops.h"
#include "core/parallel/tensor/layers.h"

namespace colossal::parallel {
namespace grid_detail {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A group that splits something: a member with more than one rank (a default group, or one of
// size one, is the dense case and costs nothing).
bool splits(const dist::Group& g) { return g.is_member() && g.size() > 1; }

torch::Tensor gathered(const torch::Tensor& x, int64_t dim, const dist::Group& g) {
  return splits(g) ? all_gather_along(x, dim, g) : x;
}
torch::Tensor scattered(const torch::Tensor& x, int64_t dim, const dist::Group& g) {
  return splits(g) ? reduce_scatter_along(x, dim, g) : x;
}

struct CommHolder : torch::CustomClassHolder {
  CommHolder(GridLinearComm c, std::shared_ptr<amp::Fp8LinearState> f) : comm(std::move(c)), fp8(std::move(f)) {}
  GridLinearComm comm;
  std::shared_ptr<amp::Fp8LinearState> fp8;  // null: the products in the tensors' precision
};



// x W^T over blocks (tensor_grid.h's GridLinearComm). Saves the local blocks only and gathers
// them again in backward. Under --fp8_communication the activation gathers (x in e4m3, the 3D
// output gradient in e5m2) carry FP8 on their tagged handles; weight blocks and every reduction
// stay exact.
struct GridMatmul : torch::autograd::Function<GridMatmul> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               c10::intrusive_ptr<CommHolder> holder) {
    const auto& c = holder->comm;
    auto xg = all_gather_along_payload(x, c.input_dim, c.input_gather, amp::Fp8Format::kE4M3);
    auto wg = gathered(w, c.weight_dim, c.weight_gather);
    torch::Tensor y;
    if (holder->fp8) {  // amp/fp8_linear.h's products on the gathered blocks
      auto qx = holder->fp8->input.quantize(xg), qw = holder->fp8->weight.quantize(wg);
      ctx->saved_data["x_scale"] = qx.scale.item<double>();
      ctx->saved_data["w_scale"] = qw.scale.item<double>();
      y = amp::fp8_linear_output(qx, qw, x.scalar_type());
    } else {
      y = torch::matmul(xg, wg.t());
    }
    ctx->save_for_backward({x, w});
    ctx->saved_data["comm"] = c10::IValue::make_capsule(holder);
    return scattered(y, 0, c.output_scatter);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto* holder = static_cast<CommHolder*>(ctx->saved_data["comm"].toCapsule().get());
    const auto& c = holder->comm;
    auto saved = ctx->get_saved_variables();
    auto xg = all_gather_along_payload(saved[0], c.input_dim, c.input_gather, amp::Fp8Format::kE4M3);
    auto wg = gathered(saved[1], c.weight_dim, c.weight_gather);
    auto dy = all_gather_along_payload(grads[0].contiguous(), 0, c.output_scatter, amp::Fp8Format::kE5M2);
    torch::Tensor dx, dw;
    if (holder->fp8) {  // forward's FP8 operands again (its scales), and the gradient in e5m2
      std::tie(dx, dw) = amp::fp8_linear_gradients(
          holder->fp8->grad_output.quantize(dy),
          amp::quantize_fp8(xg, amp::Fp8Format::kE4M3, ctx->saved_data["x_scale"].toDouble()),
          amp::quantize_fp8(wg, amp::Fp8Format::kE4M3, ctx->saved_data["w_scale"].toDouble()),
          saved[0].scalar_type(), saved[1].scalar_type());
    } else {
      dx = torch::matmul(dy, wg);
      dw = dy.reshape({-1, dy.size(-1)}).t().mm(xg.reshape({-1, xg.size(-1)}));
    }
    // Each gradient is partial over the ranks its tensor was gathered from: summed and split back.
    dx = scattered(dx, c.input_dim, c.input_gather);
    dw = scattered(dw, c.weight_dim, c.weight_gather);
    return {dx, dw, torch::Tensor()};
  }
};

// Parameters replicated over `g` (each rank's gradient covers its own rows): gradients summed.
torch::Tensor replicated(const torch::Tensor& p, const dist::Group& g) {
  return splits(g) ? copy_to_group(p, g) : p;
}

}  // namespace grid_detail

using grid_detail::splits;

torch::Tensor grid_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                          const GridLinearComm& comm, const std::shared_ptr<amp::Fp8LinearState>& fp8) {
  auto parts = [](const dist::Group& g) { return splits(g) ? g.size() : 1; };
  const int64_t x_in = x.size(-1) * (comm.input_dim == -1 ? parts(comm.input_gather) : 1);
  COLOSSAL_CHECK(weight.dim() == 2 && x_in == weight.size(1) * (comm.weight_dim == 1 ? parts(comm.weight_gather) : 1),
                 "[tp] grid_linear: input ", x.sizes(), " (", x_in, " features once gathered) against a weight block ",
                 weight.sizes(), " of a ", parts(comm.weight_gather), "-way gather");
  auto w = grid_detail::replicated(weight, comm.weight_replicas);
  auto y = grid_detail::GridMatmul::apply(x, w, c10::make_intrusive<grid_detail::CommHolder>(comm, fp8));
  return bias.defined() ? y + grid_detail::replicated(bias, comm.out.rows) : y;
}

torch::Tensor grid_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                            const ActivationLayout& layout) {
  const double features = static_cast<double>(x.size(-1) * layout.feature_parts());
  auto xf = x.to(torch::kFloat);
  auto mean_square = all_reduce_sum(xf.pow(2).sum(-1, /*keepdim=*/true), layout.features) / features;
  auto y = (xf * torch::rsqrt(mean_square + eps)).to(x.scalar_type());
  return y * grid_detail::replicated(weight, layout.rows);
}

torch::Tensor grid_layer_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                              double eps, const ActivationLayout& layout) {
  const double features = static_cast<double>(x.size(-1) * layout.feature_parts());
  auto xf = x.to(torch::kFloat);
  // Two passes (the mean, then the variance about it): E[x^2] - E[x]^2 loses digits.
  auto mean = all_reduce_sum(xf.sum(-1, true), layout.features) / features;
  auto centred = xf - mean;
  auto variance = all_reduce_sum(centred.pow(2).sum(-1, true), layout.features) / features;
  auto y = (centred * torch::rsqrt(variance + eps)).to(x.scalar_type()) * grid_detail::replicated(weight, layout.rows);
  return bias.defined() ? y + grid_detail::replicated(bias, layout.rows) : y;
}

torch::Tensor grid_embedding(const torch::Tensor& ids, const torch::Tensor& weight, const ActivationLayout& layout) {
  return torch::embedding(grid_detail::replicated(weight, layout.rows), ids);
}

torch::Tensor grid_vocab_embedding(const torch::Tensor& ids, const torch::Tensor& weight,
                                   const ActivationLayout& layout) {
  if (!splits(layout.rows)) return torch::embedding(weight, ids);
  // Every rank of the row group looks up all of the group's ids in its vocabulary range.
  auto all_ids = all_gather_along(ids.contiguous(), 0, layout.rows);
  const int64_t start = layout.row_index() * weight.size(0);
  return reduce_scatter_along_dim(vocab_parallel_partial_lookup(weight, all_ids, start), 0, layout.rows);
}

torch::Tensor mask_padded_vocab(const torch::Tensor& logits, int64_t vocab, const ActivationLayout& layout) {
  const int64_t part = logits.size(-1), start = layout.feature_index() * part;
  if (start + part <= vocab) return logits;
  auto column = torch::arange(start, start + part, torch::TensorOptions().device(logits.device()));
  return logits.masked_fill(column.ge(vocab), -std::numeric_limits<float>::infinity());
}

torch::Tensor grid_cross_entropy(const torch::Tensor& logits, const torch::Tensor& target,
                                 const ActivationLayout& layout, int64_t ignore_index) {
  COLOSSAL_CHECK(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0),
                 "[tp] grid_cross_entropy: expected logits [N, V'/parts] and target [N], got ", logits.sizes(), " and ",
                 target.sizes());
  // Divided by the grid's token count, so the row group's shares sum to the mean over the batch.
  auto count = target.ne(ignore_index).sum().to(torch::kDouble);
  if (splits(layout.rows)) dist::all_reduce(count, layout.rows);
  const double total = std::max(1.0, count.item<double>());
  torch::Tensor share;
  if (splits(layout.features)) {
    share = vocab_parallel_cross_entropy(logits, target, layout.features, ignore_index, total);
  } else {
    share = torch::nn::functional::cross_entropy(
                logits.to(torch::kFloat), target,
                torch::nn::functional::CrossEntropyFuncOptions().ignore_index(ignore_index).reduction(torch::kSum)) /
            total;
  }
  // The same mean on every rank; each rank's gradient is its own rows' part.
  return splits(layout.rows) ? reduce_from_group(share, layout.rows) : share;
}

// Both through the block's ShardSpec (grid_shard_spec): the slicing and gathering every split
// parameter goes through.
torch::Tensor take_block(const torch::Tensor& full, const GridBlock& block) {
  const auto spec = grid_shard_spec(block, full.sizes().vec());
  return slice_of(full, spec, spec.local_size).contiguous().clone();
}

torch::Tensor gather_block(const torch::Tensor& local, const GridBlock& block) {
  auto shape = local.sizes().vec();
  for (const auto& cut : block.cuts) shape[cut.dim] *= cut.parts;
  return gather_full(local.detach(), grid_shard_spec(block, shape));
}

torch::Tensor split_activation(const torch::Tensor& full, const ActivationLayout& layout, bool features) {
  GridBlock b;
  b.cuts.push_back({0, layout.row_parts(), layout.row_index(), layout.rows});
  if (features)
    b.cuts.push_back({static_cast<int>(full.dim() - 1), layout.feature_parts(), layout.feature_index(), layout.features});
  COLOSSAL_CHECK(full.size(0) % layout.row_parts() == 0, "[tp] a batch of ", full.size(0),
                 " does not divide over the grid's ", layout.row_parts(), " row blocks");
  return take_block(full, b);
}

torch::Tensor gather_activation(const torch::Tensor& local, const ActivationLayout& layout, bool features) {
  auto t = grid_detail::gathered(local.detach().contiguous(), 0, layout.rows);
  return features ? grid_detail::gathered(t, -1, layout.features) : t;
}

torch::Tensor enter_grid(const torch::Tensor& full, const ActivationLayout& layout) {
  COLOSSAL_CHECK(full.size(0) % layout.row_parts() == 0, "[tp] a batch of ", full.size(0),
                 " does not divide over the grid's ", layout.row_parts(), " row blocks");
  return split_along_dim(split_along_dim(full, 0, layout.rows), -1, layout.features);
}

torch::Tensor leave_grid(const torch::Tensor& local, const ActivationLayout& layout) {
  return gather_whole_along_dim(gather_whole_along_dim(local, -1, layout.features), 0, layout.rows);
}

}  // namespace colossal::parallel
