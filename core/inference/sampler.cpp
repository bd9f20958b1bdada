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

TokenDistribution token_distribution(const at::Tensor& logits_in, const SamplingParams& p,
                                     const std::vector<int64_t>& prompt, const std::vector<int64_t>& output) {
  const int64_t vocab = logits_in.size(0);
  TokenDistribution d;
  std::vector<float>& x = d.logits;
  x.resize(static_cast<size_t>(vocab));
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

  if (p.temperature == 0.0) {  // greedy: the first maximum, as argmax
    d.order = {std::max_element(x.begin(), x.end()) - x.begin()};
    d.prob = {1.0};
    d.kept = 1.0;
    d.greedy = true;
    return d;
  }
  for (float& v : x) v /= static_cast<float>(p.temperature);

  // Where top-k, top-p or min-p cut the candidates: sorted by logit (descending, ties by id for
  // determinism), then cut. Otherwise every token, by id.
  std::vector<int64_t>& order = d.order;
  order.resize(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  int64_t keep = vocab;
  auto before = [&](int64_t a, int64_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
  const bool top_k = p.top_k > 0 && p.top_k < vocab, sorted = top_k || p.top_p < 1.0 || p.min_p > 0;
  if (top_k) {
    keep = p.top_k;
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), before);
  } else if (sorted) {
    std::sort(order.begin(), order.end(), before);
  }
  const float m = sorted ? x[static_cast<size_t>(order[0])] : *std::max_element(x.begin(), x.end());
  std::vector<double>& prob = d.prob;
  prob.resize(static_cast<size_t>(keep));
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
  order.resize(static_cast<size_t>(keep));
  prob.resize(static_cast<size_t>(keep));
  d.kept = 0;
  for (double v : prob) d.kept += v;
  return d;
}

double TokenDistribution::probability(int64_t token) const {
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i] == token) return prob[i] / kept;
  return 0.0;
}

double TokenDistribution::log_softmax(int64_t token) const {
  float m = *std::max_element(logits.begin(), logits.end());
  double s = 0;
  for (float a : logits) s += std::exp(static_cast<double>(a - m));
  return static_cast<double>(logits[static_cast<size_t>(token)] - m) - std::log(s);
}

int64_t draw(const TokenDistribution& d, std::mt19937_64& rng) {
  if (d.greedy) return d.order[0];
  double u = std::uniform_real_distribution<double>(0.0, d.kept)(rng);
  for (size_t i = 0; i < d.order.size(); ++i) {
    u -= d.prob[i];
    if (u <= 0) return d.order[i];
  }
  return d.order.back();
}

Sampled sample(const at::Tensor& logits, const SamplingParams& p, const std::vector<int64_t>& prompt,
               const std::vector<int64_t>& output, std::mt19937_64& rng) {
  auto d = token_distribution(logits, p, prompt, output);
  int64_t token = draw(d, rng);
  return {token, p.logprobs ? d.log_softmax(token) : 0.0};
}

Verified verify_drafted(const TokenDistribution& p, const TokenDistribution& q, int64_t drafted,
                        std::mt19937_64& rng) {
  if (p.greedy) return {p.order[0], p.order[0] == drafted};
  // q's probabilities by token, for the residual.
  std::vector<double> q_of(q.logits.size(), 0.0);
  for (size_t i = 0; i < q.order.size(); ++i) q_of[static_cast<size_t>(q.order[i])] = q.prob[i] / q.kept;
  auto q_at = [&](int64_t t) { return t >= 0 && t < static_cast<int64_t>(q_of.size()) ? q_of[static_cast<size_t>(t)] : 0.0; };
  const double pd = p.probability(drafted), qd = q_at(drafted);
  if (qd > 0 && pd >= qd) return {drafted, true};
  if (qd > 0 && std::uniform_real_distribution<double>(0.0, 1.0)(rng) * qd < pd) return {drafted, true};
  // Rejected: the residual max(0, p - q) over p's candidates (where p is 0 the residual is too).
  std::vector<double> residual(p.order.size());
  double total = 0;
  for (size_t i = 0; i < p.order.size(); ++i)
    total += residual[i] = std::max(0.0, p.prob[i] / p.kept - q_at(p.order[i]));
  if (!(total > 0)) return {draw(p, rng), false};  // p == q up to rounding: a rejection had ~0 chance
  double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  for (size_t i = 0; i < p.order.size(); ++i) {
    u -= residual[i];
    if (u <= 0 && residual[i] > 0) return {p.order[i], false};
  }
  for (size_t i = p.order.size(); i-- > 0;)
    if (residual[i] > 0) return {p.order[i], false};
  return {p.order[0], false};
}

}  // namespace colossal::inference
