#include "core/nn/neftune.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>

#include "core/common/check.h"

namespace colossal::nn {

torch::Tensor neftune_noise(at::IntArrayRef shape, double alpha, uint64_t seed) {
  COLOSSAL_CHECK(shape.size() == 3, "[neftune] expected embeddings [batch, seq_len, hidden], got ", shape);
  COLOSSAL_CHECK(alpha >= 0, "[neftune] alpha must be >= 0, got ", alpha);
  const double magnitude = alpha / std::sqrt(static_cast<double>(shape[1] * shape[2]));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::empty(shape, torch::kFloat).uniform_(-magnitude, magnitude, gen);
}

}  // namespace colossal::nn
