#include "llama/perplexity.h"

#include <ATen/ATen.h>

#include <cmath>

namespace colossal::llama {

PerplexityResult perplexity(LlamaInference& model, const TokenDataset& data, int64_t max_samples, int64_t chunk) {
  PerplexityResult r;
  double nll = 0;
  const int64_t n = max_samples > 0 ? std::min(max_samples, data.size()) : data.size();
  for (int64_t i = 0; i < n; ++i) {
    auto b = data.batch({i});
    auto ids = b.input_ids[0].contiguous();
    auto labels = b.labels[0];
    std::vector<int64_t> tokens(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
    // Labels are the inputs shifted by one (-100 where nothing is scored): logits at position t
    // predict labels[t + 1], as in the training loss.
    auto logp = at::log_softmax(model.logits(tokens, chunk), 1);  // [T, vocab]
    auto target = labels.narrow(0, 1, labels.size(0) - 1);
    auto keep = target != -100;
    auto picked = logp.narrow(0, 0, target.size(0)).gather(1, target.clamp_min(0).unsqueeze(1)).squeeze(1);
    nll -= picked.masked_select(keep).sum().item<double>();
    r.tokens += keep.sum().item<int64_t>();
    ++r.samples;
  }
  r.mean_nll = r.tokens > 0 ? nll / static_cast<double>(r.tokens) : 0;
  r.perplexity = std::exp(r.mean_nll);
  return r;
}

}  // namespace colossal::llama
