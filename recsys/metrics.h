#pragma once
// Ranking and calibration metrics of click predictions.
#include <torch/types.h>

namespace colossal::recsys {

/// Area under the ROC curve of scores against 0/1 labels (ties share their average rank);
/// NaN when one class is absent.
double auc(const torch::Tensor& scores, const torch::Tensor& labels);

/// Mean binary cross entropy of logits against 0/1 labels.
double log_loss(const torch::Tensor& logits, const torch::Tensor& labels);

}  // namespace colossal::recsys
