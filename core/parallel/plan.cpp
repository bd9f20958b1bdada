#include "core/parallel/plan.h"

namespace colossal::parallel {

const char* to_string(SplitStyle style) {
  switch (style) {
    case SplitStyle::kReplicate: return "replicate";
    case SplitStyle::kColumn: return "column";
    case SplitStyle::kRow: return "row";
    case SplitStyle::kVocabEmbedding: return "vocab_embedding";
    case SplitStyle::kVocabHead: return "vocab_head";
  }
  return "?";
}

bool path_matches(const std::string& pattern, const std::string& path) {
  size_t p = 0, q = 0;
  while (p < pattern.size() || q < path.size()) {
    size_t pe = pattern.find('.', p), qe = path.find('.', q);
    if (pe == std::string::npos) pe = pattern.size();
    if (qe == std::string::npos) qe = path.size();
    if (p >= pattern.size() || q >= path.size()) return false;  // different number of components
    std::string a = pattern.substr(p, pe - p), b = path.substr(q, qe - q);
    if (a != "*" && a != b) return false;
    p = pe + 1;
    q = qe + 1;
  }
  return true;
}

const SplitRule* ParallelPlan::find(const std::string& module_path) const {
  for (const auto& r : rules)
    if (path_matches(r.pattern, module_path)) return &r;
  return nullptr;
}

}  // namespace colossal::parallel
