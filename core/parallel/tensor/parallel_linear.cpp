#include "core/parallel/tensor/parallel_linear.h"

#include <torch/nn/init.h>
#include <torch/torch.h>

#include <cmath>

#include "core/common/check.h"
#include "core/nn/deferred_init.h"
#include "core/nn/weight_gradient_store.h"
#include "core/parallel/sequence/sequence_ops.h"
#include "core/parallel/tensor/comm_ops.h"
#include "core/parallel/tensor/layers.h"

namespace colossal::parallel {

bool splits_sequence_over_tp(const ParallelContext& ctx) {
  return ctx.tensor_parallel() && ctx.sp_mode == SequenceParallelMode::kSplitGather;
}

torch::Tensor enter_tensor_parallel(const torch::Tensor& x, const ParallelContext& ctx) {
  if (!ctx.tensor_parallel()) return x;
  // split_gather: the sequence shards are gathered (backward: the partial gradients of the
  // column layers are summed and scattered back to their shards in one reduce-scatter).
  return ctx.sp_mode == SequenceParallelMode::kSplitGather ? gather_sequence(x, ctx.tp) : copy_to_group(x, ctx.tp);
}

torch::Tensor leave_tensor_parallel(const torch::Tensor& partial, const ParallelContext& ctx) {
  if (!ctx.tensor_parallel()) return partial;
  return ctx.sp_mode == SequenceParallelMode::kSplitGather ? reduce_scatter_sequence(partial, ctx.tp)
                                                           : reduce_from_group(partial, ctx.tp);
}

ParallelLinearImpl::ParallelLinearImpl(const ParallelLinearOptions& o, const ParallelContext& ctx)
    : options_(o), ctx_(ctx) {
  const int tp = ctx.tp_size(), r = ctx.tp_rank();
  COLOSSAL_CHECK(o.in_features > 0 && o.out_features > 0, "[tp] linear: features must be positive, got ",
                 o.in_features, " -> ", o.out_features);
  lay_out(tp, r);  // this rank's shapes (no memory yet)
  if (nn::deferred_init_enabled()) return;  // the model initialises them when boosted
  // The full tensors, initialised as torch::nn::Linear does, then this rank's slice.
  torch::NoGradGuard no_grad;
  auto w = torch::empty({o.out_features, o.in_features});
  torch::nn::init::kaiming_uniform_(w, std::sqrt(5.0));
  const auto specs = shard_specs();
  weight.set_data(local_part(w, split_spec(specs, "weight"), weight));
  if (o.bias) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(o.in_features));
    auto b = torch::empty({o.out_features}).uniform_(-bound, bound);
    bias.set_data(local_part(b, split_spec(specs, "bias"), bias));
  }
}

void ParallelLinearImpl::lay_out(int tp, int r) {
  const auto& o = options_;
  int64_t out = o.out_features, in = o.in_features;
  if (tp > 1) {
    switch (o.style) {
      case SplitStyle::kColumn:
        COLOSSAL_CHECK(out % tp == 0, "[tp] column-parallel linear: ", out, " output features do not divide by tp ", tp);
        out /= tp;
        out_start_ = r * out;
        break;
      case SplitStyle::kVocabHead: {
        const int64_t part = padded_vocab(o.out_features, tp) / tp;
        out_start_ = r * part;
        const int64_t real = std::clamp<int64_t>(o.out_features - out_start_, 0, part);
        if (real < part) {
          pad_mask_ = torch::zeros({part}, torch::kBool);
          pad_mask_.narrow(0, real, part - real).fill_(true);
        }
        out = part;
        break;
      }
      case SplitStyle::kRow:
        COLOSSAL_CHECK(in % tp == 0, "[tp] row-parallel linear: ", in, " input features do not divide by tp ", tp);
        in /= tp;
        break;
      case SplitStyle::kReplicate: break;
      case SplitStyle::kVocabEmbedding: COLOSSAL_FAIL("[tp] a linear layer cannot be split as an embedding");
    }
  }
  weight = register_parameter("weight", nn::deferred_empty({out, in}));
  if (o.bias) bias = register_parameter("bias", nn::deferred_empty({o.style == SplitStyle::kRow ? o.out_features : out}));
}

torch::Tensor ParallelLinearImpl::forward(const torch::Tensor& x) {
  if (!ctx_.tensor_parallel()) return nn::linear(x, weight, bias);
  switch (options_.style) {
    case SplitStyle::kRow: {
      auto y = leave_tensor_parallel(nn::linear(x, weight), ctx_);
      return bias.defined() ? y + bias : y;
    }
    case SplitStyle::kVocabHead: {
      auto y = nn::linear(x, weight, bias);
      if (pad_mask_.defined()) {
        if (pad_mask_.device() != y.device()) pad_mask_ = pad_mask_.to(y.device());  // follows the model
        y = y.masked_fill(pad_mask_, -std::numeric_limits<float>::infinity());
      }
      return options_.gather_output ? gather_last_dim(y, ctx_.tp) : y;
    }
    case SplitStyle::kColumn: {
      auto y = nn::linear(x, weight, bias);
      return options_.gather_output ? gather_last_dim(y, ctx_.tp) : y;
    }
    default: return nn::linear(x, weight, bias);
  }
}

std::map<std::string, ShardSpec> ParallelLinearImpl::shard_specs() const {
  std::map<std::string, ShardSpec> out;
  if (!ctx_.tensor_parallel()) return out;
  ShardSpec s;
  s.group = ctx_.tp;
  switch (options_.style) {
    case SplitStyle::kColumn:
    case SplitStyle::kVocabHead: {
      s.dim = 0;
      s.full_size = options_.out_features;
      s.local_start = out_start_;
      s.local_size = std::clamp<int64_t>(options_.out_features - out_start_, 0, weight.size(0));
      out["weight"] = s;
      if (bias.defined()) out["bias"] = s;
      break;
    }
    case SplitStyle::kRow: {
      s.dim = 1;
      s.full_size = options_.in_features;
      s.local_start = ctx_.tp_rank() * weight.size(1);
      s.local_size = weight.size(1);
      out["weight"] = s;
      if (bias.defined()) {  // replicated; complete on every rank unless added to sequence shards
        ShardSpec rb;
        rb.group = ctx_.tp;
        rb.gradient_partial = splits_sequence_over_tp(ctx_);
        out["bias"] = rb;
      }
      break;
    }
    default: {
      s.gradient_partial = options_.gradient_partial;
      out["weight"] = s;
      if (bias.defined()) out["bias"] = s;
    }
  }
  return out;
}

}  // namespace colossal::parallel
