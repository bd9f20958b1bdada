#pragma once
// Top-k routing for a mixture-of-experts layer, as Mixtral does it: a softmax over the router
// logits in fp32, the k most probable experts per token, their probabilities renormalised to sum
// to one. Optionally a capacity: each expert takes at most ceil(capacity_factor x tokens x k /
// experts) assignments per forward; first choices are served before second choices, and within a
// choice earlier tokens first (GShard's order). A dropped assignment contributes nothing, so a
// token whose every assignment was dropped passes through the layer on the residual alone.
//
// The auxiliary losses are accumulated over a forward's MoE layers (RouterLosses) because
// Hugging Face's load-balancing loss is a product of means taken over every layer's tokens at
// once, not a sum of per-layer terms.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace colossal::parallel::expert {

struct RouterOptions {
  int64_t num_experts = 8;
  int64_t top_k = 2;
  bool normalize_top_k = true;  // Mixtral: the k weights of a token sum to one
  double capacity_factor = 0;   // 0: dropless
  void validate() const;        // names the field: experts < 1, top_k outside [1, experts], factor < 0
};

/// One forward's routing of N tokens over E experts.
struct Routing {
  at::Tensor logits;   // [N, E] router logits (compute dtype)
  at::Tensor probs;    // [N, E] softmax, fp32
  at::Tensor experts;  // [N, k] int64, most probable first
  at::Tensor weights;  // [N, k] fp32 combine weights; differentiable through the logits
  at::Tensor kept;     // [N, k] bool: false where the capacity dropped the assignment
  int64_t capacity = 0;  // assignments an expert takes (0: dropless)
};

Routing route(const at::Tensor& logits, const RouterOptions& options);

/// The assignments per expert capacity allows for `tokens` tokens (0 when dropless).
int64_t expert_capacity(int64_t tokens, const RouterOptions& options);

/// What a forward's MoE layers add up for the auxiliary losses and the router statistics.
class RouterLosses {
 public:
  void clear();
  void add(const Routing& routing);
  bool empty() const { return layers_ == 0; }
  /// Switch Transformer's load-balancing loss as Hugging Face computes it for Mixtral:
  /// E x sum_e (assignments to e / rows) x (summed probability of e / rows), every layer's
  /// tokens pooled (assignments before any capacity drop, as transformers counts them).
  at::Tensor load_balancing_loss() const;
  /// ST-MoE's router z-loss: mean over tokens and layers of logsumexp(logits)^2.
  at::Tensor z_loss() const;
  /// Assignments each expert computed (kept ones), summed over the layers: [E], no gradient.
  at::Tensor tokens_per_expert() const { return kept_; }
  int64_t dropped() const { return dropped_; }
  int64_t layers() const { return layers_; }

  /// Pipeline stages: the statistics as one row of `width` values (width >= packed_width), the
  /// probability and z sums keeping their graph, so they can travel with a stage's activations
  /// and carry the losses' gradients back; and the row read back into this (empty) object.
  static int64_t packed_width(int64_t experts) { return 3 * experts + 4; }
  /// (No layer yet: a row of zeros for `experts` experts.)
  at::Tensor pack(int64_t width, c10::ScalarType dtype, int64_t experts) const;
  void unpack(const at::Tensor& row, int64_t experts);

 private:
  at::Tensor assigned_, prob_sum_, kept_, z_sum_;
  int64_t rows_ = 0, layers_ = 0, dropped_ = 0, experts_ = 0;
};

}  // namespace colossal::parallel::expert
