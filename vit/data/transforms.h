#pragma once
// Image transforms from a decoded 8-bit image to the model's normalised [C, H, W] floats.
//
// Training: random resized crop (area fraction and aspect ratio drawn as torchvision does,
// falling back to a centre crop), horizontal flip, optional RandAugment-style colour operations
// (N operations drawn from brightness, contrast, colour, sharpness, posterize, solarize,
// autocontrast, equalize, identity at magnitude M of 10), then normalisation. Every random draw
// comes from a generator seeded by (seed, epoch, sample index), so a sample's augmentation does
// not depend on which thread or rank prepares it, and a resumed run sees the same images.
//
// Evaluation: the shorter side resized to image_size, a centre crop, normalisation.
#include <cstdint>
#include <opencv2/core/mat.hpp>
#include <string>
#include <vector>

namespace colossal::vit {

struct TransformOptions {
  int64_t image_size = 224;  // output height and width
  int channels = 3;          // output channels (grayscale is replicated, colour averaged to fit)
  bool random_resized_crop = true;
  double crop_min_scale = 0.08, crop_max_scale = 1.0;    // fraction of the image's area
  double crop_min_ratio = 3.0 / 4.0, crop_max_ratio = 4.0 / 3.0;
  bool horizontal_flip = true;
  int randaugment_ops = 0;         // 0: no colour operations
  double randaugment_magnitude = 9;  // 0..10
  std::vector<double> mean = {0.5}, std = {0.5};  // per channel, or one value for all
  void validate() const;
};

/// The generator seed of one sample's augmentation.
uint64_t sample_seed(uint64_t seed, int64_t epoch, int64_t index);

/// Writes channels x image_size x image_size floats to `out`.
void transform_train(const cv::Mat& image, const TransformOptions& options, uint64_t sample_seed, float* out);
void transform_eval(const cv::Mat& image, const TransformOptions& options, float* out);

}  // namespace colossal::vit
