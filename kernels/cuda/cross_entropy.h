#pragma once
// Softmax cross entropy over rows of logits, with the gradient written over the logits in the
// same launch (kernels/cpu/cross_entropy's contract on the GPU): one block per row reads the
// row twice (a running max and sum of exp in one pass, then the gradient), so nothing but one
// number per row is kept beside the logits. The caller chunks the rows (core/nn's
// linear_cross_entropy) so that no logits tensor for the whole batch need exist.
#include <cstdint>

#include "kernels/cuda/common.h"

namespace colossal::kernels::cuda {

struct CrossEntropyRows {
  int64_t rows = 0, vocab = 0;
  int64_t row_stride = 0;           // elements between rows (>= vocab)
  const int64_t* target = nullptr;  // [rows], each in [0, vocab) or ignore_index (device)
  int64_t ignore_index = -100;
  float* loss = nullptr;            // [rows]: log-sum-exp minus the target's logit; 0 if ignored
  bool write_gradient = false;      // overwrite the logits with scale * (softmax - one_hot)
  const float* gradient_scale = nullptr;  // device scalar (1 / count for a mean), read by the kernel
  DType dtype = DType::f32;
};

void cross_entropy_rows(void* logits, const CrossEntropyRows& args, Stream stream);

}  // namespace colossal::kernels::cuda
