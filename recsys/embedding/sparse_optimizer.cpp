#include "recsys/embedding/sparse_optimizer.h"

#include <cmath>

#include "core/common/check.h"

namespace colossal::recsys {

int64_t SparseOptimizerOptions::state_width(int64_t dim) const {
  return column_blocks() * dim + row_scalars();
}

void SparseOptimizerOptions::validate() const {
  COLOSSAL_CHECK(kind == "adagrad" || kind == "rowwise_adagrad" || kind == "adamw", "[sparse optimizer] '", kind,
                 "': expected adagrad, rowwise_adagrad or adamw");
  COLOSSAL_CHECK(lr > 0 && eps > 0 && beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1 && weight_decay >= 0,
                 "[sparse optimizer] lr ", lr, ", eps ", eps, ", betas (", beta1, ", ", beta2, "), weight_decay ",
                 weight_decay, " out of range");
}

void update_row(const SparseOptimizerOptions& o, float* w, float* s, const float* grad, int64_t dim) {
  const auto lr = static_cast<float>(o.lr), eps = static_cast<float>(o.eps), wd = static_cast<float>(o.weight_decay);
  if (o.kind == "adagrad") {
    for (int64_t j = 0; j < dim; ++j) {
      const float g = grad[j] + wd * w[j];
      s[j] += g * g;
      w[j] -= lr * g / (std::sqrt(s[j]) + eps);
    }
    return;
  }
  if (o.kind == "rowwise_adagrad") {
    float squares = 0;
    for (int64_t j = 0; j < dim; ++j) {
      const float g = grad[j] + wd * w[j];
      squares += g * g;
    }
    s[0] += squares / static_cast<float>(dim);
    const float step = lr / (std::sqrt(s[0]) + eps);
    for (int64_t j = 0; j < dim; ++j) w[j] -= step * (grad[j] + wd * w[j]);
    return;
  }
  float* m = s;
  float* v = s + dim;
  float& t = s[2 * dim];
  t += 1;
  const float b1 = static_cast<float>(o.beta1), b2 = static_cast<float>(o.beta2);
  const float bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
  for (int64_t j = 0; j < dim; ++j) {
    w[j] *= 1 - lr * wd;
    m[j] = b1 * m[j] + (1 - b1) * grad[j];
    v[j] = b2 * v[j] + (1 - b2) * grad[j] * grad[j];
    w[j] -= (lr / bc1) * m[j] / (std::sqrt(v[j]) / std::sqrt(bc2) + eps);
  }
}

}  // namespace colossal::recsys
