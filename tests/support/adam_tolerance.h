#pragma once
// Parameters after a few Adam(W) steps of a parallel run against the one-process reference.
// Adam divides each element's step by the root of its own squared-gradient average, so where a
// gradient is within rounding noise of zero, the order in which microbatches or slices were
// summed (the gradients themselves agree to 1e-5, checked separately) can move that element's
// step anywhere within +-lr; the size of that effect depends on the BLAS code path (MKL's
// AVX-512 kernels on Intel move more such elements than its AVX2 ones). So: elements whose
// first gradient is decisive (above 1e-3 of the tensor's largest) are held to rtol/atol; the
// rest to Adam's own bound, 2 x lr per step.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

namespace colossal::testing {

inline void expect_adam_params_close(const torch::Tensor& got, const torch::Tensor& want,
                                     const torch::Tensor& first_grad, double lr, int steps, double rtol,
                                     double atol, const std::string& what) {
  auto diff = (got.detach() - want.detach()).abs();
  auto bound = want.detach().abs() * rtol + atol;
  auto g = first_grad.detach().abs();
  auto decisive = g > g.max() * 1e-3;
  auto excess = (diff - bound).masked_fill(decisive.logical_not(), -1.0);
  EXPECT_LE(excess.max().item<double>(), 0.0)
      << what << ": an element with a decisive gradient differs by "
      << diff.masked_select(decisive).max().item<double>() << " (rtol " << rtol << ", atol " << atol << ")";
  EXPECT_LE(diff.max().item<double>(), 2.0 * lr * steps) << what << ": beyond Adam's own bound";
}

}  // namespace colossal::testing
