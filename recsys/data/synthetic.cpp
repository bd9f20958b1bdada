#include "recsys/data/synthetic.h"

#include <torch/torch.h>

#include <cmath>

#include "core/common/check.h"

namespace colossal::recsys {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser: a well-spread hash
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
double uniform(uint64_t h) { return (static_cast<double>(h >> 11) + 0.5) / 9007199254740992.0; }  // (0, 1)
double normal(uint64_t h) { return std::sqrt(-2 * std::log(uniform(h))) * std::cos(6.283185307179586 * uniform(mix(h))); }

// A rank in [0, n) with P(r) roughly proportional to 1 / (r + 1)^s (inverse of the continuous CDF).
int64_t zipf_rank(double u, int64_t n, double s) {
  if (std::fabs(s - 1) < 1e-9) return std::min<int64_t>(n - 1, static_cast<int64_t>(std::pow(n + 1.0, u)) - 1);
  const double a = 1 - s, top = std::pow(n + 1.0, a);
  const double x = std::pow(1 + u * (top - 1), 1 / a) - 1;
  return std::clamp<int64_t>(static_cast<int64_t>(x), 0, n - 1);
}

}  // namespace

void SyntheticOptions::validate() const {
  COLOSSAL_CHECK(samples > 0 && dense >= 1 && fields >= 1 && table_size >= 1, "[synthetic] samples ", samples,
                 ", dense ", dense, ", fields ", fields, ", table_size ", table_size, ": expected all >= 1");
  COLOSSAL_CHECK(zipf > 0, "[synthetic] zipf ", zipf, ": expected > 0");
}

CtrDataset make_synthetic(const SyntheticOptions& o, int64_t begin, int64_t count) {
  o.validate();
  COLOSSAL_CHECK(begin >= 0 && count >= 0 && begin + count <= o.samples, "[synthetic] samples [", begin, ", ",
                 begin + count, ") of ", o.samples);
  CtrDataset out;
  for (int64_t j = 0; j < o.dense; ++j) out.dense_names.push_back("dense" + std::to_string(j));
  for (int64_t f = 0; f < o.fields; ++f) out.fields.push_back({"sparse" + std::to_string(f), o.table_size, {}, {0}});
  out.dense = torch::empty({count, o.dense});
  out.labels = torch::empty({count});
  auto* d = out.dense.data_ptr<float>();
  auto* l = out.labels.data_ptr<float>();
  const double scale = 1.0 / std::sqrt(static_cast<double>(o.dense + o.fields));
  for (int64_t k = 0; k < count; ++k) {
    const uint64_t row = mix(o.seed * 0x100000001B3ull + static_cast<uint64_t>(begin + k));
    double logit = -0.5;
    for (int64_t j = 0; j < o.dense; ++j) {
      const double x = normal(mix(row + 1000 + j));
      d[k * o.dense + j] = static_cast<float>(x);
      logit += scale * normal(mix(o.seed + 77 + j)) * x;  // the hidden dense weight of feature j
    }
    for (int64_t f = 0; f < o.fields; ++f) {
      const int64_t rank = zipf_rank(uniform(mix(row + 5000 + f)), o.table_size, o.zipf);
      // Hot ids scattered over the table, not all at its start.
      const auto id = static_cast<int64_t>(mix(static_cast<uint64_t>(rank) * 31 + f + o.seed) % o.table_size);
      out.fields[f].ids.push_back(id);
      out.fields[f].offsets.push_back(k + 1);
      logit += 2 * scale * normal(mix((static_cast<uint64_t>(f) << 40) ^ static_cast<uint64_t>(id) ^ (o.seed << 20)));
    }
    l[k] = uniform(mix(row + 99)) < 1 / (1 + std::exp(-logit)) ? 1.0f : 0.0f;
  }
  return out;
}

}  // namespace colossal::recsys
