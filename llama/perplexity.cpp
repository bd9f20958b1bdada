#include "llama/perplexity.h"

#include <ATen/ATen.h>

#include <cmath>

#include "core/common/check.h"

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

PerplexityResult perplexity_in_chunks(LlamaInference& model, const std::vector<int64_t>& tokens, int64_t n_ctx,
                                      int64_t bos, int64_t max_chunks, int64_t chunk) {
  COLOSSAL_CHECK(n_ctx >= 4, "[perplexity] chunks of ", n_ctx, " tokens: expected at least 4");
  const auto have = static_cast<int64_t>(tokens.size());
  COLOSSAL_CHECK(have >= 2 * n_ctx, "[perplexity] the text is ", have, " tokens: chunks of ", n_ctx,
                 " need at least ", 2 * n_ctx, " (two chunks, as llama-perplexity asks)");
  int64_t chunks = have / n_ctx;
  if (max_chunks > 0) chunks = std::min(chunks, max_chunks);
  const int64_t first = n_ctx / 2;
  PerplexityResult r;
  double nll = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    std::vector<int64_t> ids(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
    if (bos >= 0) ids[0] = bos;
    auto logp = at::log_softmax(model.logits(ids, chunk), 1);  // [n_ctx, vocab]
    auto next = at::tensor(std::vector<int64_t>(ids.begin() + first + 1, ids.end()), at::kLong);
    nll -= logp.narrow(0, first, n_ctx - 1 - first).gather(1, next.unsqueeze(1)).sum().item<double>();
    r.tokens += n_ctx - 1 - first;
    ++r.samples;
  }
  r.mean_nll = nll / static_cast<double>(r.tokens);
  r.perplexity = std::exp(r.mean_nll);
  return r;
}

}  // namespace colossal::llama
