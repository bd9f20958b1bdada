#include "sora/models/stdit.h"

#include <torch/torch.h>

#include <cmath>

#include "core/common/check.h"
#include "core/nn/activation_checkpoint.h"
#include "core/nn/module_hooks.h"
#include "core/parallel/tensor/comm_ops.h"
#include "sora/models/attention.h"

namespace colossal::sora {
namespace {

torch::Tensor modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale) {
  return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1);
}

torch::Tensor layer_norm(const torch::Tensor& x) {
  return torch::layer_norm(x, {x.size(-1)}, {}, {}, 1e-6);  // no affine: adaLN modulates it
}

// One transformer block over [N, L, D] (N = samples x frames for spatial blocks, samples x
// positions for temporal ones, sample-major); `mod` [N, 6, D] the timestep's modulation for each
// row. Cross-attention sees each sample's rows as one sequence [B, N/B x L, D] against its
// caption [B, M, E]: every query attends to the same keys either way, and the caption's keys and
// values are projected once per sample instead of once per row.
class StditBlockImpl : public torch::nn::Module {
 public:
  StditBlockImpl(int64_t dim, int64_t heads, int64_t mlp_ratio, int64_t text_dim, dist::Group sequence_group = {}) {
    table_ = register_parameter("scale_shift_table", torch::randn({6, dim}) / std::sqrt(static_cast<double>(dim)));
    attn_ = register_module("attn", SelfAttention(dim, heads, std::move(sequence_group)));
    cross_ = register_module("cross_attn", CrossAttention(dim, text_dim, heads));
    fc1_ = register_module("fc1", torch::nn::Linear(dim, mlp_ratio * dim));
    fc2_ = register_module("fc2", torch::nn::Linear(mlp_ratio * dim, dim));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mod, const torch::Tensor& text,
                        const torch::Tensor& mask) {
    const auto m = (table_.unsqueeze(0) + mod).unbind(1);  // shift, scale, gate (attention); shift, scale, gate (MLP)
    auto h = x + m[2].unsqueeze(1) * attn_->forward(modulate(layer_norm(x), m[0], m[1]));
    h = h + cross_->forward(h.reshape({text.size(0), -1, h.size(2)}), text, mask).reshape(h.sizes());
    return h + m[5].unsqueeze(1) * nn::call(fc2_, torch::gelu(nn::call(fc1_, modulate(layer_norm(h), m[3], m[4])), "tanh"));
  }

 private:
  torch::Tensor table_;
  SelfAttention attn_{nullptr};
  CrossAttention cross_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(StditBlock);

// The learned null caption [L, E] that dropped captions see.
class NullCaptionImpl : public torch::nn::Module {
 public:
  NullCaptionImpl(int64_t tokens, int64_t dim) {
    tokens_ = register_parameter("tokens", torch::randn({tokens, dim}) / std::sqrt(static_cast<double>(dim)));
  }
  torch::Tensor forward(int64_t batch) { return tokens_.unsqueeze(0).expand({batch, -1, -1}); }

 private:
  torch::Tensor tokens_;
};
TORCH_MODULE(NullCaption);

}  // namespace

torch::Tensor sinusoidal_embedding(const torch::Tensor& positions, int64_t dim) {
  const int64_t half = dim / 2;
  const auto freqs = torch::exp(-std::log(10000.0) * torch::arange(half, torch::kFloat) / half);
  const auto args = positions.to(torch::kFloat).unsqueeze(-1) * freqs;
  auto emb = torch::cat({torch::cos(args), torch::sin(args)}, -1);
  if (dim % 2) emb = torch::cat({emb, torch::zeros_like(emb.narrow(-1, 0, 1))}, -1);
  return emb;
}

void StditOptions::validate() const {
  COLOSSAL_CHECK(in_channels >= 1 && hidden >= 2 && depth >= 1 && heads >= 1 && hidden % heads == 0 &&
                     mlp_ratio >= 1 && text_dim >= 1 && text_tokens >= 1,
                 "[stdit] in_channels ", in_channels, ", hidden ", hidden, ", depth ", depth, ", heads ", heads,
                 ": expected positive sizes with hidden divisible by heads");
  COLOSSAL_CHECK(patch.size() == 3 && patch[0] >= 1 && patch[1] >= 1 && patch[2] >= 1, "[stdit] patch ", patch,
                 ": expected three sizes (t, h, w) >= 1");
}

StditImpl::StditImpl(StditOptions options, parallel::ParallelContext parallel)
    : options_(std::move(options)), parallel_(std::move(parallel)) {
  options_.validate();
  const auto& o = options_;
  COLOSSAL_CHECK(!parallel_.tensor_parallel() && !parallel_.grid_parallel() && parallel_.ep_size() == 1 &&
                     !parallel_.pipeline.enabled(),
                 "[stdit] tensor, expert and pipeline parallelism do not apply to STDiT (tp ", parallel_.tp_size(),
                 ", ep ", parallel_.ep_size(), "); use data parallelism and --sp N --sp_mode all_to_all");
  const int sp = parallel_.sp_size();
  COLOSSAL_CHECK(sp == 1 || parallel_.sp_mode == parallel::SequenceParallelMode::kAllToAll, "[stdit] sp_mode ",
                 parallel::to_string(parallel_.sp_mode), ": STDiT's attention is bidirectional, so its sequence "
                 "parallelism is all_to_all (ring_attn is causal, split_gather needs tensor parallelism)");
  COLOSSAL_CHECK(o.heads % sp == 0, "[stdit] ", o.heads,
                 " heads do not split over sp ", sp, " (all_to_all gives each rank heads / sp)");
  const dist::Group sequence_group = sp > 1 ? parallel_.sp : dist::Group();
  const int64_t D = o.hidden;
  patch_embed_ = register_module(
      "patch_embed", torch::nn::Conv3d(torch::nn::Conv3dOptions(o.in_channels, D, o.patch).stride(o.patch)));
  time_embed_ = register_module("time_embed", torch::nn::Sequential(torch::nn::Linear(256, D), torch::nn::SiLU(),
                                                                     torch::nn::Linear(D, D)));
  time_modulation_ = register_module("time_modulation", torch::nn::Linear(D, 6 * D));
  spatial_ = register_module("spatial_blocks", torch::nn::ModuleList());
  temporal_ = register_module("temporal_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.depth; ++i) {
    spatial_->push_back(StditBlock(D, o.heads, o.mlp_ratio, o.text_dim, sequence_group));
    temporal_->push_back(StditBlock(D, o.heads, o.mlp_ratio, o.text_dim));
  }
  final_table_ = register_parameter("final_scale_shift_table", torch::randn({2, D}) / std::sqrt(static_cast<double>(D)));
  const int64_t patch_volume = o.patch[0] * o.patch[1] * o.patch[2];
  final_linear_ = register_module("final_linear", torch::nn::Linear(D, patch_volume * o.in_channels));
  null_text_ = register_module("null_text", NullCaption(o.text_tokens, o.text_dim));
  torch::NoGradGuard no_grad;
  final_linear_->weight.zero_();  // the untrained model predicts zero velocity, as DiT starts
  final_linear_->bias.zero_();
}

// Every module that owns parameters runs through nn::call (the final table under run_hooked), so
// ZeRO-3 (gemini) gathers each module's parameters when it runs and again for its backward.
std::pair<torch::Tensor, torch::Tensor> StditImpl::null_text(int64_t batch) {
  return {nn::call(*std::static_pointer_cast<NullCaptionImpl>(null_text_), batch),
          torch::ones({batch, options_.text_tokens}, torch::kBool)};
}

torch::Tensor StditImpl::forward(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& text,
                                 const torch::Tensor& text_mask) {
  const auto& o = options_;
  COLOSSAL_CHECK(x.dim() == 5 && x.size(1) == o.in_channels, "[stdit] expected latents [B, ", o.in_channels,
                 ", T, H, W], got ", x.sizes());
  COLOSSAL_CHECK(x.size(2) % o.patch[0] == 0 && x.size(3) % o.patch[1] == 0 && x.size(4) % o.patch[2] == 0,
                 "[stdit] latents of ", x.sizes(), " do not divide into patches of ", o.patch);
  COLOSSAL_CHECK(text.dim() == 3 && text.size(0) == x.size(0) && text.size(2) == o.text_dim &&
                     text_mask.sizes() == text.sizes().slice(0, 2),
                 "[stdit] caption tokens ", text.sizes(), " with mask ", text_mask.sizes(), " for ", x.size(0),
                 " samples of width ", o.text_dim);
  const int64_t B = x.size(0), D = o.hidden;
  const auto patches = nn::call(patch_embed_, x);  // [B, D, T', H', W']
  const int64_t T = patches.size(2), Hp = patches.size(3), Wp = patches.size(4);
  int64_t S = Hp * Wp;
  auto h = patches.flatten(3).permute({0, 2, 3, 1});  // [B, T', S, D]
  const auto grid = torch::stack(torch::meshgrid({torch::arange(Hp), torch::arange(Wp)}, "ij"), -1).view({S, 2});
  const auto spatial_pos = torch::cat({sinusoidal_embedding(grid.select(1, 0), D / 2),
                                       sinusoidal_embedding(grid.select(1, 1), D - D / 2)}, -1);  // [S, D]
  const auto temporal_pos = sinusoidal_embedding(torch::arange(T), D);                               // [T', D]
  h = h + spatial_pos;
  // Sequence parallelism: this rank's S / n of every frame's tokens from here to the final layer.
  // A plain slice: its backward leaves the other ranks' rows at zero, so the gradients of what
  // came before are this rank's part of a sum over the group.
  const int sp = parallel_.sp_size();
  COLOSSAL_CHECK(S % sp == 0, "[stdit] ", S, " spatial tokens per frame (", Hp, " x ", Wp,
                 " patches) do not split over sp ", sp);
  const int64_t S_all = S;
  if (sp > 1) {
    S = S_all / sp;
    h = h.narrow(2, parallel_.sp_rank() * S, S);
  }
  const auto time = nn::call(*time_embed_->ptr<torch::nn::LinearImpl>(2),  // [B, D]
                             torch::silu(nn::call(*time_embed_->ptr<torch::nn::LinearImpl>(0),
                                                  sinusoidal_embedding(t * 1000, 256))));
  const auto mod = nn::call(time_modulation_, torch::silu(time)).view({B, 6, D});
  // Per-row conditioning for the spatial layout (rows: sample-major frames) and the temporal one
  // (rows: sample-major positions).
  const auto mod_s = mod.repeat_interleave(T, 0), mod_t = mod.repeat_interleave(S, 0);
  for (int64_t i = 0; i < o.depth; ++i) {
    auto* spatial = spatial_[i]->as<StditBlockImpl>();
    auto* temporal = temporal_[i]->as<StditBlockImpl>();
    // Conditioning travels as inputs (not captures): checkpointing runs the blocks again during
    // the backward, and their gradients must reach the timestep and caption encoders once.
    auto run_spatial = [=](const std::vector<torch::Tensor>& in) {  // [B, T', S, D] -> same
      return nn::call(*spatial, in[0].reshape({B * T, S, D}), in[1], in[2], in[3]).view({B, T, S, D});
    };
    auto run_temporal = [=](const std::vector<torch::Tensor>& in) {
      auto rows = in[0].permute({0, 2, 1, 3}).reshape({B * S, T, D});  // [B x S, T', D]
      if (i == 0) rows = rows + temporal_pos;
      return nn::call(*temporal, rows, in[1], in[2], in[3]).view({B, S, T, D}).permute({0, 2, 1, 3});
    };
    const std::vector<torch::Tensor> spatial_args = {mod_s, text, text_mask}, temporal_args = {mod_t, text, text_mask};
    auto with = [](const torch::Tensor& x, std::vector<torch::Tensor> rest) {
      rest.insert(rest.begin(), x);
      return rest;
    };
    if (o.activation_checkpointing && is_training()) {
      h = colossal::nn::checkpoint(colossal::nn::MultiBlock(run_spatial), with(h, spatial_args));
      h = colossal::nn::checkpoint(colossal::nn::MultiBlock(run_temporal), with(h, temporal_args));
    } else {
      h = run_temporal(with(run_spatial(with(h, spatial_args)), temporal_args));
    }
  }
  const auto fin = nn::run_hooked(*this, [&] { return final_table_.unsqueeze(0) + time.unsqueeze(1); })
                       .unbind(1);  // shift, scale
  auto out = nn::call(final_linear_, modulate(layer_norm(h.reshape({B, T * S, D})), fin[0], fin[1]));
  if (sp > 1) {  // every rank's tokens, in order: [B, T' S/n, P] -> [B, T' S, P]; backward: own slice
    const auto local = out.view({B, T, S, out.size(-1)}).transpose(2, 3);  // [B, T', P, S/n]
    out = parallel::gather_last_dim(local, parallel_.sp).transpose(2, 3).reshape({B, T * S_all, out.size(-1)});
  }
  // Unpatchify: [B, T' S, pt ph pw C] -> [B, C, T' pt, H' ph, W' pw].
  const int64_t pt = o.patch[0], ph = o.patch[1], pw = o.patch[2], C = o.in_channels;
  out = out.view({B, T, Hp, Wp, pt, ph, pw, C}).permute({0, 7, 1, 4, 2, 5, 3, 6});
  return out.reshape({B, C, T * pt, Hp * ph, Wp * pw});
}

}  // namespace colossal::sora
