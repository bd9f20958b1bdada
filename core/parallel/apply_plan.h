#pragma once
// The one place a parallel plan is applied. A model builds each of its layers through a
// PlanBuilder that knows where the layer sits (its module path) and how the job is split; the
// builder looks the path up in the model's plan and returns the layer that rule asks for:
//
//   ParallelPlan plan = my_model::parallel_plan(config);      // the model's own plan (data)
//   PlanBuilder root{plan, ParallelContext::from(dims), ""};
//   q_proj = register_module("q_proj", root.at("layers.0.q_proj").linear(D, D, /*bias=*/false));
//
// Without tensor parallelism every layer is exactly its plain LibTorch counterpart (same
// initialisation, same forward), so one model code path serves every tp size. Models keep their
// plans; nothing here knows a model.
#include <string>

#include "core/parallel/context.h"
#include "core/parallel/plan.h"
#include "core/parallel/tensor/parallel_embedding.h"
#include "core/parallel/tensor/parallel_linear.h"

namespace colossal::parallel {

struct PlanBuilder {
  const ParallelPlan& plan;
  const ParallelContext& parallel;
  std::string path;  // "model.layers.3"

  /// The builder of a child module ("self_attn" -> "model.layers.3.self_attn").
  PlanBuilder at(const std::string& child) const;
  /// The plan's rule for this path (replicate when the plan names none).
  SplitRule rule() const;
  /// A linear layer as the rule says. `kv_heads`: for a rule marked kv_heads (grouped-query
  /// key/value projections), the number of key/value heads: with fewer than tp of them the
  /// layer is kept whole on every rank (its gradient summed over tp).
  ParallelLinear linear(int64_t in, int64_t out, bool bias, int64_t kv_heads = 0) const;
  /// An embedding: vocabulary-parallel under a kVocabEmbedding rule, whole otherwise.
  ParallelEmbedding embedding(int64_t vocab, int64_t dim) const;
};

}  // namespace colossal::parallel
