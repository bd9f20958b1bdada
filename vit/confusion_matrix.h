#pragma once
// Classification results: top-1/top-5 counts and a confusion matrix (rows: true class, columns:
// predicted class), written as CSV for programs and as a PNG heat map for people.
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace colossal::vit {

struct ClassificationCounts {
  explicit ClassificationCounts(int64_t classes);
  /// Adds a batch: logits [B, classes], labels [B]; rows with weight 0 are not counted.
  void add(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& loss_per_sample,
           const std::vector<double>& weight = {});
  /// Everything as one float64 tensor (for one all-reduce across ranks) and back.
  at::Tensor pack() const;
  void unpack(const at::Tensor& packed);

  double samples = 0, top1 = 0, top5 = 0, loss_sum = 0;
  at::Tensor confusion;  // [classes, classes] int64
  double top1_accuracy() const { return samples ? top1 / samples : 0; }
  double top5_accuracy() const { return samples ? top5 / samples : 0; }
  double mean_loss() const { return samples ? loss_sum / samples : 0; }
};

/// "true\predicted,c0,c1,...\nc0,n00,n01,..." with class names quoted where needed.
void write_confusion_csv(const at::Tensor& confusion, const std::vector<std::string>& class_names,
                         const std::string& path);
/// A heat map coloured by each row's share (per-class recall), counts printed in the cells,
/// class names on both axes, a title. Written atomically.
void write_confusion_png(const at::Tensor& confusion, const std::vector<std::string>& class_names,
                         const std::string& title, const std::string& path);

}  // namespace colossal::vit
