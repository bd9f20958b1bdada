#include "core/inference/sampler.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "core/common/check.h"

namespace colossal::inference {

void SamplingParams::validate() const {
  COLOSSAL_CHECK(temperature >= 0, "temperature: expected >= 0, got ", temperature);
  COLOSSAL_CHECK(top_k >= 0, "top_k: expected >= 0, got ", top_k);
  COLOSSAL_CHECK(top_p > 0 && top_p <= 1, "top_p: expected in (0, 1], got ", top_p);
  COLOSSAL_CHECK(min_p >= 0 && min_p <= 1, "min_p: expected in [0, 1], got ", min_p);
  COLOSSAL_CHECK(repetition_penalty > 0, "repetition_penalty: expected > 0, got ", repetition_penalty);
  COLOSSAL_CHECK(presence_penalty >= -2 && presence_penalty <= 2, "presence_penalty: expected in [-2, 2], got ",
                 presence_penalty);
  COLOSSAL_CHECK(frequency_penalty >= -2 && frequency_penalty <= 2, "frequency_penalty: expected in [-2, 2], got ",
                 frequency_penalty);
  COLOSSAL_CHECK(max_tokens >= 1, "max_tokens: expected >= 1, got ", max_tokens);
}

Sampled sample(const at::Tensor& logits_in, const SamplingParams& p, const std::vector<int64_t>& prompt,
               const std::vector<int64_t>& output, std::mt19937_64& rng) {
  const int64_t vocab = logits_in.size(0);
  std::vector<float> x(static_cast<size_t>(vocab));
  auto lf = logits_in.to(at::kFloat).contiguous();
  std::copy(lf.data_ptr<float>(), lf.data_ptr<float>() + vocab, x.begin());

  // Penalties: repetition over prompt and output; presence and frequency over the output.
  if (p.repetition_penalty != 1.0) {
    std::vector<char> seen(static_cast<size_t>(vocab), 0);
    for (auto t : prompt) if (t >= 0 && t < vocab) seen[static_cast<size_t>(t)] = 1;
    for (auto t : output) if (t >= 0 && t < vocab) seen[static_cast<size_t>(t)] = 1;
    for (int64_t t = 0; t < vocab; ++t) {
      if (!seen[static_cast<size_t>(t)]) continue;
      float& v = x[static_cast<size_t>(t)];
      v = v > 0 ? v / static_cast<float>(p.repetition_penalty) : v * static_cast<float>(p.repetition_penalty);
    }
  }
  if (p.presence_penalty != 0.0 || p.frequency_penalty != 0.0) {
    std::unordered_map<int64_t, int64_t> counts;
    for (auto t : output) ++counts[t];
    for (const auto& [t, c] : counts) {
      if (t < 0 || t >= vocab) continue;
      x[static_cast<size_t>(t)] -= static_cast<float>(p.presence_penalty + p.frequency_penalty * c);
    }
  }

  auto log_softmax = [&](const std::vector<float>& v, int64_t t) {
    float m = *std::max_element(v.begin(), v.end());
    double s = 0;
    for (float a : v) s += std::exp(static_cast<double>(a - m));
    return static_cast<double>(v[static_cast<size_t>(t)] - m) - std::log(s);
  };

  if (p.temperature == 0.0) {  // greedy: the first maximum, as argmax
    int64_t best = std::max_element(x.begin(), x.end()) - x.begin();
    return {best, p.logprobs ? log_softmax(x, best) : 0.0};
  }
  for (float& v : x) v /= static_cast<float>(p.temperature);

  // Candidates sorted by logit (descending, ties by id for determinism), then cut by top-k,
  // top-p and min-p.
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  int64_t keep = vocab;
  if (p.top_k > 0 && p.top_k < vocab) {
    keep = p.top_k;
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int64_t a, int64_t b) {
      return x[a] > x[b] || (x[a] == x[b] && a < b);
    });
  } else {
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  }
  const float m = x[static_cast<size_t>(order[0])];
  std::vector<double> prob(static_cast<size_t>(keep));
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) total += prob[i] = std::exp(static_cast<double>(x[order[i]] - m));
  for (auto& v : prob) v /= total;
  if (p.min_p > 0) {
    const double floor = p.min_p * prob[0];
    int64_t k = 1;
    while (k < keep && prob[static_cast<size_t>(k)] >= floor) ++k;
    keep = k;
  }
  if (p.top_p < 1.0) {
    double cum = 0;
    int64_t k = 0;
    while (k < keep) {
      cum += prob[static_cast<size_t>(k++)];
      if (cum >= p.top_p) break;
    }
    keep = k;
  }
  double kept = 0;
  for (int64_t i = 0; i < keep; ++i) kept += prob[static_cast<size_t>(i)];
  double u = std::uniform_real_distribution<double>(0.0, kept)(rng);
  int64_t chosen = order[static_cast<size_t>(keep - 1)];
  for (int64_t i = 0; i < keep; ++i) {
    u -= prob[static_cast<size_t>(i)];
    if (u <= 0) {
      chosen = order[static_cast<size_t>(i)];
      break;
    }
  }
  return {chosen, p.logprobs ? log_softmax(x, chosen) : 0.0};
}

}  // namespace colossal::inference
