#pragma once
// Compares two recordings of the same steps (StepRecorder): a parallel layout against one
// process. For each step: the loss, and for gradients and parameters the tensor that differs
// most. A gradient's difference is max|layout - reference| over its largest magnitude (at least
// 1e-4 of the model's largest gradient), so an element near zero in a large tensor does not
// dominate and a uniform factor (a gradient averaged where it should be summed) shows as that
// factor. A parameter's difference is measured against the model's largest weight, the scale an
// optimizer step works on. Step 0 holds the starting weights (both runs must begin alike).
#include <cstdint>
#include <string>
#include <vector>

namespace colossal::booster {

struct VerifyTolerances {
  // Relative differences accepted; < 0: the default for the recordings' precision (fp32: the
  // summation-order rounding of a different layout; bf16/fp16: their rounding).
  double loss = -1, gradient = -1, parameter = -1;
  // An absolute loss difference accepted whatever the relative one: for a loss that is zero in exact
  // arithmetic, where rounding alone sets its value (GRPO's on-policy objective: the advantages of a
  // group sum to zero). 0: off.
  double loss_abs = 0;
  /// The defaults for "fp32", "bf16" or "fp16" where a field is < 0.
  VerifyTolerances resolved(const std::string& precision) const;
};

struct TensorDifference {
  std::string name;
  double max_abs_diff = 0;
  double relative = 0;
};

struct StepComparison {
  int64_t step = 0;
  bool has_loss = true;  // false for step 0 (the starting weights)
  double layout_loss = 0, reference_loss = 0, loss_relative = 0;
  TensorDifference gradient, parameter;  // the worst of each
  int64_t gradients = 0, parameters = 0;  // how many tensors were compared
};

struct VerifyReport {
  std::string layout, reference, precision;
  VerifyTolerances tolerances;
  std::vector<StepComparison> steps;
  std::vector<std::string> problems;  // beyond tolerance, or missing: each names step and tensor
  std::vector<std::string> notes;     // tensors recorded on one side only that could not be compared
  std::vector<std::string> hints;     // patterns in the differences (every gradient off by one factor)
  bool passed() const { return problems.empty(); }
  /// The table and the verdict, for people.
  std::string text() const;
};

/// Reads DIR/step-*.safetensors of both recordings (the same steps in each) and compares them;
/// throws naming the directory or step when a recording is missing or unreadable.
VerifyReport compare_recordings(const std::string& layout_dir, const std::string& reference_dir,
                                const VerifyTolerances& tolerances = {});

}  // namespace colossal::booster
