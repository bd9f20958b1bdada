#pragma once
// Parallel plans: a model states, per submodule, how tensor parallelism splits it; core applies
// the plan (the tensor-parallel layers and their application come with the hybrid plugin). The
// plan is data, so it can be printed, checked against a model, and changed by users.
//
//   plan.rules = {{"model.layers.*.self_attn.q_proj", SplitStyle::kColumn},
//                 {"model.layers.*.self_attn.o_proj", SplitStyle::kRow}, ...};
// Patterns are module paths with '*' matching one path component (a layer index).
#include <string>
#include <vector>

namespace colossal::parallel {

enum class SplitStyle {
  kReplicate,     // every tensor-parallel rank holds all of it
  kColumn,        // Linear split along its output features (weight rows)
  kRow,           // Linear split along its input features (weight columns); output reduced
  kVocabEmbedding,  // Embedding split along the vocabulary (padded to a multiple of 64 x tp)
  kVocabHead,     // output layer split along the vocabulary, into a vocab-parallel loss
};

const char* to_string(SplitStyle style);

struct SplitRule {
  std::string pattern;  // module path, '*' = one component
  SplitStyle style = SplitStyle::kReplicate;
  bool gather_output = false;  // column: all-gather the output instead of leaving it split
  // Grouped-query attention: k/v projections split by heads only when there are at least tp
  // key/value heads; otherwise each rank keeps the heads its query heads use.
  bool kv_heads = false;
};

struct ParallelPlan {
  std::vector<SplitRule> rules;
  /// The rule for a module path (the first that matches), or nullptr.
  const SplitRule* find(const std::string& module_path) const;
};

/// '*' matches exactly one dot-separated component.
bool path_matches(const std::string& pattern, const std::string& path);

}  // namespace colossal::parallel
