#include "core/parallel/tensor/parallel_linear.h"

#include <torch/nn/init.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstdio>
#include <mutex>

#include "core/common/check.h"
#include "core/nn/deferred_init.h"
#include "core/nn/module_hooks.h"
#include "core/nn/weight_gradient_store.h"
#include "core/parallel/sequence/sequence_ops.h"
#include "core/parallel/tensor/grid/grid_layers.h"
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

namespace linear_grid {  // named: core is compiled in unity batches

bool is_column(SplitStyle style) { return style != SplitStyle::kRow; }

// A grid layer's full (padded) weight shape: a vocabulary head's rows padded to the grid.
int64_t padded_out(const ParallelLinearOptions& o, const TensorGrid& g) {
  return o.style == SplitStyle::kVocabHead ? padded_vocab(o.out_features, g.weight_out_parts()) : o.out_features;
}

// A replicated layer stays whole on a grid (a small head on a whole input: ViT's classifier).
bool on_grid(const ParallelContext& ctx, SplitStyle style) {
  return ctx.grid_parallel() && style != SplitStyle::kReplicate;
}

}  // namespace linear_grid


void ParallelLinearImpl::lay_out(int tp, int r) {
  const auto& o = options_;
  int64_t out = o.out_features, in = o.in_features;
  if (linear_grid::on_grid(ctx_, o.style)) {
    const auto& g = ctx_.grid;
    const char* mode = dist::to_string(g.mode());
    COLOSSAL_CHECK(o.style == SplitStyle::kColumn || o.style == SplitStyle::kRow || o.style == SplitStyle::kVocabHead,
                   "[tp] tp_mode ", mode, ": a ", to_string(o.style), " linear layer (", in, " -> ", out,
                   ") is not built for the grid yet (column, row, vocabulary-head and replicated layers are)");
    COLOSSAL_CHECK(!o.gather_output, "[tp] tp_mode ", mode, ": gather_output is a 1d layer's option");
    const auto& comm = g.linear(linear_grid::is_column(o.style));
    out = linear_grid::padded_out(o, g);
    COLOSSAL_CHECK(out % g.weight_out_parts() == 0, "[tp] tp_mode ", mode, " linear ", in, " -> ", out, ": ", out,
                   " output features do not divide into the grid's ", g.weight_out_parts(), " weight blocks");
    COLOSSAL_CHECK(in % g.weight_in_parts() == 0, "[tp] tp_mode ", mode, " linear ", in, " -> ", out, ": ", in,
                   " input features do not divide into the grid's ", g.weight_in_parts(), " blocks");
    grid_out_ = out / comm.out.feature_parts();
    out_start_ = comm.out.feature_index() * grid_out_;
    weight = register_parameter("weight", nn::deferred_empty({out / g.weight_out_parts(), in / g.weight_in_parts()}));
    if (o.bias) bias = register_parameter("bias", nn::deferred_empty({grid_out_}));
    return;
  }
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

torch::Tensor ParallelLinearImpl::base(const torch::Tensor& x, const torch::Tensor& b) {
  if (fp8_) return amp::fp8_linear(x, weight, b, fp8_);
  if (!quantized_.defined()) return nn::linear(x, weight, b);
  auto y = nn::quantized_linear(x, quantized_);
  return b.defined() ? y + b : y;
}

torch::Tensor ParallelLinearImpl::forward(const torch::Tensor& x) {
  if (linear_grid::on_grid(ctx_, options_.style)) {
    const auto& comm = ctx_.grid.linear(linear_grid::is_column(options_.style));
    auto y = grid_linear(x, weight, bias, comm, fp8_);
    return options_.style == SplitStyle::kVocabHead ? mask_padded_vocab(y, options_.out_features, comm.out) : y;
  }
  if (!ctx_.tensor_parallel()) {
    auto y = base(x, bias);
    return has_lora() ? plus_lora(y, x) : y;
  }
  switch (options_.style) {
    case SplitStyle::kRow: {
      auto partial = base(x, {});
      if (has_lora()) partial = plus_lora(partial, x);  // B (A_i x_i) summed by the same reduction
      auto y = leave_tensor_parallel(partial, ctx_);
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
      auto y = base(x, bias);
      if (has_lora()) y = plus_lora(y, x);
      return options_.gather_output ? gather_last_dim(y, ctx_.tp) : y;
    }
    default: {
      auto y = base(x, bias);
      return has_lora() ? plus_lora(y, x) : y;
    }
  }
}

torch::Tensor ParallelLinearImpl::local_forward(const torch::Tensor& x) {
  COLOSSAL_CHECK(!ctx_.grid_parallel(), "[tp] local_forward: not on a 2d/2.5d/3d grid");
  COLOSSAL_CHECK(options_.style != SplitStyle::kVocabHead, "[tp] local_forward: not for a vocabulary head");
  auto y = base(x, options_.style == SplitStyle::kRow ? torch::Tensor() : bias);
  return has_lora() ? plus_lora(y, x) : y;
}

namespace {
thread_local bool lora_off = false;
}  // namespace

LoraDisabledGuard::LoraDisabledGuard() : previous_(lora_off) { lora_off = true; }
LoraDisabledGuard::~LoraDisabledGuard() { lora_off = previous_; }
bool lora_disabled() { return lora_off; }

torch::Tensor ParallelLinearImpl::plus_lora(const torch::Tensor& y, const torch::Tensor& x) {
  if (lora_off) return y;
  auto in = x;
  if (lora_dropout_ > 0 && is_training()) in = torch::dropout(x, lora_dropout_, /*train=*/true);
  auto a = nn::run_hooked(*lora_A, [&] { return nn::linear(in, lora_A->weight); });
  // y + scaling (A x) B^T in one GEMM (addmm's beta and alpha): no separate scale and add
  // passes over the layer's output.
  return nn::run_hooked(*lora_B, [&] {
    const auto& b = lora_B->weight;
    auto out = torch::addmm(y.reshape({-1, y.size(-1)}), a.reshape({-1, a.size(-1)}), b.t(), 1.0, lora_scaling_);
    return out.view(y.sizes());
  });
}

void ParallelLinearImpl::add_lora(const LoraAdapterOptions& o, const std::string& name) {
  COLOSSAL_CHECK(!has_lora(), "[lora] ", name, " already has an adapter");
  COLOSSAL_CHECK(!ctx_.grid_parallel(), "[lora] ", name, ": LoRA with tp_mode ", dist::to_string(ctx_.grid.mode()),
                 " is not built yet (use --tp_mode 1d with LoRA)");
  COLOSSAL_CHECK(options_.style == SplitStyle::kColumn || options_.style == SplitStyle::kRow ||
                     options_.style == SplitStyle::kReplicate,
                 "[lora] ", name, ": adapters go on linear layers, not on a vocabulary head (train it in full through modules_to_save)");
  const int64_t in = options_.in_features, out = options_.out_features;
  COLOSSAL_CHECK(o.rank >= 1 && o.rank <= std::min(in, out), "[lora] ", name, ": rank ", o.rank,
                 " must be between 1 and the layer's smaller side (", in, " -> ", out, ")");
  COLOSSAL_CHECK(o.alpha > 0, "[lora] alpha must be positive, got ", o.alpha);
  COLOSSAL_CHECK(o.dropout >= 0 && o.dropout < 1, "[lora] dropout must be in [0, 1), got ", o.dropout);
  // Under tp a column layer's adapter input is whole on every rank and would need the same mask
  // on each; not built yet.
  COLOSSAL_CHECK(o.dropout == 0 || !ctx_.tensor_parallel(), "[lora] ", name, ": adapter dropout ", o.dropout,
                 " with tensor parallelism is not supported yet (use --lora_dropout 0 with --tp > 1)");
  torch::NoGradGuard no_grad;
  lora_scaling_ = o.alpha / static_cast<double>(o.rank);
  lora_dropout_ = o.dropout;
  torch::Tensor a = torch::zeros({o.rank, in}), b = torch::zeros({out, o.rank});
  if (o.init == "pissa") {
    // PiSSA (Meng et al., 2024): the top `rank` singular directions of W move into the adapter
    // (B A = U_r S_r V_r^T / scaling), the base keeps the rest, so the model is unchanged.
    COLOSSAL_CHECK(!ctx_.tensor_parallel() && !nn::is_deferred(weight), "[lora] ", name,
                   ": PiSSA initialisation needs the whole base weight on one process, built eagerly "
                   "(use --lora_init kaiming or gaussian under tensor parallelism or lazy construction)");
    auto w = weight.to(torch::kFloat64);
    auto [u, sv, vh] = at::linalg_svd(w, /*full_matrices=*/false);
    auto root = (sv.narrow(0, 0, o.rank) / lora_scaling_).sqrt();
    a = (root.unsqueeze(1) * vh.narrow(0, 0, o.rank)).to(torch::kFloat);
    b = (u.narrow(1, 0, o.rank) * root.unsqueeze(0)).to(torch::kFloat);
    weight.copy_((w - lora_scaling_ * b.to(torch::kFloat64).matmul(a.to(torch::kFloat64))).to(weight.scalar_type()));
  } else {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(nn::parameter_seed(o.seed, name + ".lora_A.weight"));
    if (o.init == "gaussian") {
      a.normal_(0.0, 1.0 / static_cast<double>(o.rank), gen);  // PEFT's "gaussian"
    } else {
      COLOSSAL_CHECK(o.init == "kaiming", "[lora] init '", o.init, "': expected kaiming, gaussian or pissa");
      // PEFT's default: kaiming_uniform_(a = sqrt(5)) over A's fan-in, a bound of 1 / sqrt(in).
      const double bound = 1.0 / std::sqrt(static_cast<double>(in));
      a.uniform_(-bound, bound, gen);
    }
  }
  lora_A = register_module("lora_A", LoraWeight(a));
  lora_B = register_module("lora_B", LoraWeight(b));
  if (ctx_.tensor_parallel()) {  // this rank's slices of the full tensors
    const auto specs = shard_specs();
    if (const auto* sa = split_spec(specs, "lora_A.weight")) lora_A->weight.set_data(slice_of(a, *sa, sa->local_size).clone());
    if (const auto* sb = split_spec(specs, "lora_B.weight")) lora_B->weight.set_data(slice_of(b, *sb, weight.size(0)).clone());
  }
  lora_A->weight.set_data(lora_A->weight.to(weight.device()));
  lora_B->weight.set_data(lora_B->weight.to(weight.device()));
}

void ParallelLinearImpl::quantize_base(nn::QuantizedWeight::Format format, const torch::Tensor& full_values) {
  using nn::QuantizedWeight;
  COLOSSAL_CHECK(!quantized_.defined(), "[qlora] the base of this layer is quantized already");
  COLOSSAL_CHECK(!ctx_.grid_parallel(), "[qlora] a quantized base with tp_mode ", dist::to_string(ctx_.grid.mode()),
                 " is not built yet (use --tp_mode 1d)");
  COLOSSAL_CHECK(!weight.requires_grad(), "[qlora] a trained weight cannot be quantized (only a LoRA run's frozen "
                 "base is): enable LoRA first");
  COLOSSAL_CHECK(options_.style != SplitStyle::kVocabHead, "[qlora] the vocabulary head is not quantized");
  const auto specs = shard_specs();
  const ShardSpec* split = split_spec(specs, "weight");
  COLOSSAL_CHECK(full_values.defined() || !nn::is_deferred(weight),
                 "[qlora] quantize_base: the weight has no values yet (materialise it first)");
  const auto full = (full_values.defined() ? full_values : split ? gather_full(weight, *split) : weight).to(torch::kCPU);
  const auto expected = full_shape(weight, split);
  COLOSSAL_CHECK(full.sizes().vec() == expected, "[qlora] quantize_base: values ", full.sizes(), " for a weight of ",
                 c10::IntArrayRef(expected));
  if (!split) {
    quantized_ = QuantizedWeight(full, format);
  } else {
    // This rank's rectangle of the full matrix (column layers: rows; row layers: columns).
    int64_t r0 = 0, r1 = full.size(0), c0 = 0, c1 = full.size(1);
    (split->dim == 0 ? r0 : c0) = split->local_start;
    (split->dim == 0 ? r1 : c1) = split->local_start + split->local_size;
    const bool unpadded = r1 - r0 == weight.size(0) && c1 - c0 == weight.size(1);
    if (unpadded && QuantizedWeight::part_is_exact(format, full.size(1), c0, c1)) {
      quantized_ = QuantizedWeight::part_of(full, format, r0, r1, c0, c1);
    } else {
      quantized_ = QuantizedWeight(local_part(full, split, weight), format);
      static std::once_flag said;
      if (ctx_.tp_rank() == 0)
        std::call_once(said, [&] {
          std::fprintf(stderr, "[qlora] a %ld x %ld weight split over tp %ld does not fall on %s block boundaries: "
                       "each rank quantizes its slice alone, so the base differs from one process's by its rounding\n",
                       static_cast<long>(full.size(0)), static_cast<long>(full.size(1)),
                       static_cast<long>(ctx_.tp_size()), QuantizedWeight::name(format));
        });
    }
  }
  torch::NoGradGuard no_grad;
  weight.set_data(torch::empty({0}, weight.options()));
}

void ParallelLinearImpl::enable_fp8(const amp::Fp8LinearOptions& options) {
  COLOSSAL_CHECK(!quantized_.defined(), "[fp8] a layer with a quantized (QLoRA) base cannot compute in FP8");
  COLOSSAL_CHECK(options_.style != SplitStyle::kVocabHead, "[fp8] the vocabulary head stays in the model's precision");
  fp8_ = std::make_shared<amp::Fp8LinearState>(options);
}

int enable_fp8_linears(torch::nn::Module& model, const amp::Fp8LinearOptions& options) {
  int count = 0;
  auto visit = [&](torch::nn::Module& m) {
    auto* layer = dynamic_cast<ParallelLinearImpl*>(&m);
    if (layer == nullptr || layer->options().style == SplitStyle::kVocabHead || layer->fp8()) return;
    layer->enable_fp8(options);
    ++count;
  };
  visit(model);
  for (auto& child : model.modules(/*include_self=*/false)) visit(*child);
  return count;
}

void ParallelLinearImpl::merge_lora() {
  COLOSSAL_CHECK(has_lora(), "[lora] merge: this layer has no adapter");
  COLOSSAL_CHECK(!quantized_.defined(), "[qlora] merge: the base of this layer is quantized; fold the adapter into "
                 "the original weights instead (colossal merge --model BASE --adapter DIR --output OUT)");
  torch::NoGradGuard no_grad;
  // Column and replicated layers: B_i A is this rank's rows; row layers: B A_i its columns.
  auto delta = lora_B->weight.to(torch::kFloat64).matmul(lora_A->weight.to(torch::kFloat64)) * lora_scaling_;
  weight.copy_((weight.to(torch::kFloat64) + delta).to(weight.scalar_type()));
  unregister_module("lora_A");
  unregister_module("lora_B");
  lora_A = nullptr;
  lora_B = nullptr;
}

std::map<std::string, ShardSpec> ParallelLinearImpl::shard_specs() const {
  std::map<std::string, ShardSpec> out;
  if (linear_grid::on_grid(ctx_, options_.style)) {
    const auto& g = ctx_.grid;
    const bool column = linear_grid::is_column(options_.style);
    const int64_t padded = linear_grid::padded_out(options_, g);
    out["weight"] = grid_shard_spec(g.weight_block(column), {padded, options_.in_features}, options_.out_features);
    if (bias.defined()) out["bias"] = grid_shard_spec(g.bias_block(column), {padded}, options_.out_features);
    return out;
  }
  if (!ctx_.tensor_parallel()) return out;
  ShardSpec s;
  s.group = ctx_.tp;
  switch (options_.style) {
    case SplitStyle::kColumn:
    case SplitStyle::kVocabHead: {
      s.dim = 0;
      s.full_size = options_.out_features;
      s.local_start = out_start_;
      s.local_size = std::clamp<int64_t>(options_.out_features - out_start_, 0, local_out_features());
      if (!quantized_.defined()) out["weight"] = s;
      if (bias.defined()) out["bias"] = s;
      if (options_.style == SplitStyle::kColumn) {  // B split like the weight's rows; A whole, its gradient summed
        out["lora_B.weight"] = s;
        ShardSpec a;
        a.group = ctx_.tp;
        a.gradient_partial = true;
        out["lora_A.weight"] = a;
      }
      break;
    }
    case SplitStyle::kRow: {
      s.dim = 1;
      s.full_size = options_.in_features;
      s.local_size = quantized_.defined() ? quantized_.cols() : weight.size(1);
      s.local_start = ctx_.tp_rank() * s.local_size;
      if (!quantized_.defined()) out["weight"] = s;
      out["lora_A.weight"] = s;  // A split like the weight's columns; B whole, its gradient summed
      {
        ShardSpec b;
        b.group = ctx_.tp;
        b.gradient_partial = true;
        out["lora_B.weight"] = b;
      }
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
      if (!quantized_.defined()) out["weight"] = s;
      if (bias.defined()) out["bias"] = s;
      out["lora_A.weight"] = s;
      out["lora_B.weight"] = s;
    }
  }
  return out;
}

}  // namespace colossal::parallel
