#include "core/parallel/apply_plan.h"

#include "core/common/check.h"

namespace colossal::parallel {

PlanBuilder PlanBuilder::at(const std::string& child) const {
  return {plan, parallel, path.empty() ? child : path + "." + child};
}

SplitRule PlanBuilder::rule() const {
  const auto* r = plan.find(path);
  return r ? *r : SplitRule{path, SplitStyle::kReplicate};
}

ParallelLinear PlanBuilder::linear(int64_t in, int64_t out, bool bias, int64_t kv_heads) const {
  const auto r = rule();
  COLOSSAL_CHECK(r.style != SplitStyle::kVocabEmbedding, "[plan] '", path,
                 "' is a linear layer but its rule is vocab_embedding");
  ParallelLinearOptions o{.in_features = in, .out_features = out, .bias = bias, .style = r.style,
                          .gather_output = r.gather_output};
  // Fewer key/value heads than tp: keep them whole on every rank (see parallel_linear.h).
  if (r.kv_heads && kv_heads < parallel.tp_size()) {
    o.style = SplitStyle::kReplicate;
    o.gradient_partial = true;
  }
  return ParallelLinear(o, parallel);
}

ParallelEmbedding PlanBuilder::embedding(int64_t vocab, int64_t dim) const {
  const auto r = rule();
  COLOSSAL_CHECK(r.style == SplitStyle::kVocabEmbedding || r.style == SplitStyle::kReplicate, "[plan] '", path,
                 "' is an embedding; its rule must be vocab_embedding or replicate, got ", to_string(r.style));
  if (r.style == SplitStyle::kReplicate) return ParallelEmbedding(vocab, dim, ParallelContext{});
  return ParallelEmbedding(vocab, dim, parallel);
}

}  // namespace colossal::parallel
