#pragma once
// STDiT (Open-Sora): a diffusion transformer over video latents [B, C, T, H, W]. Latents are cut
// into patches (1 x 2 x 2 by default) giving T' frames of S = H' x W' tokens; blocks alternate
// spatial self-attention (each frame's S tokens among themselves) and temporal self-attention
// (each position's T' tokens across frames), each followed by cross-attention to the caption's
// tokens and an MLP. The timestep conditions every block through adaLN-single (PixArt-alpha):
// one MLP turns the timestep into six modulation vectors (shift, scale and gate for attention
// and MLP), and each block adds its own learned table to them. A learned "null caption" stands
// in for dropped captions, which classifier-free guidance needs at sampling time.
//
// Sequence parallelism (sp_mode all_to_all, as Open-Sora's): each of the n sequence-parallel
// ranks keeps S/n of every frame's spatial tokens from the patch embedding to the final layer.
// Temporal blocks, cross-attention and MLPs are then local (a position's frames are all on one
// rank); spatial attention trades token shards for head shards (attention.h). The output is
// gathered, so every rank returns the whole velocity and computes the same loss; backward hands
// each rank the gradient of its own tokens, and the parameters' gradients are partial sums that
// the plugin adds up over the sp group (ParallelDims::gradient_group), as for LLaMA.
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <vector>

#include "core/parallel/context.h"

namespace colossal::sora {

struct StditOptions {
  int64_t in_channels = 4;
  int64_t hidden = 128, depth = 4, heads = 4;  // depth: spatial + temporal block pairs
  int64_t mlp_ratio = 4;
  std::vector<int64_t> patch = {1, 2, 2};      // (t, h, w)
  int64_t text_dim = 128, text_tokens = 64;    // the caption encoder's width and length
  bool activation_checkpointing = false;
  void validate() const;
};

class StditImpl : public torch::nn::Module {
 public:
  /// `parallel`: the job's groups (the plugin's parallel_context()); only sequence parallelism
  /// in the all_to_all mode applies to STDiT, any other split is refused by name.
  explicit StditImpl(StditOptions options = {}, parallel::ParallelContext parallel = {});
  /// The velocity for latents x [B, C, T, H, W] at timesteps t [B] in [0, 1], given caption
  /// tokens [B, L, text_dim] and their mask [B, L].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& text,
                        const torch::Tensor& text_mask);
  /// The null caption for `batch` samples (tokens and an all-true mask).
  std::pair<torch::Tensor, torch::Tensor> null_text(int64_t batch);
  const StditOptions& options() const { return options_; }

 private:
  StditOptions options_;
  parallel::ParallelContext parallel_;
  torch::nn::Conv3d patch_embed_{nullptr};
  torch::nn::Sequential time_embed_{nullptr};
  torch::nn::Linear time_modulation_{nullptr}, final_linear_{nullptr};
  torch::nn::ModuleList spatial_, temporal_;
  torch::Tensor final_table_;
  std::shared_ptr<torch::nn::Module> null_text_;  // its own module: ZeRO-3 gathers it apart from the final table
};
TORCH_MODULE(Stdit);

/// Sinusoidal embeddings of positions (any shape) -> [..., dim].
torch::Tensor sinusoidal_embedding(const torch::Tensor& positions, int64_t dim);

}  // namespace colossal::sora
