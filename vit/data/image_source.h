#pragma once
// Where training images come from, behind one interface the loader reads through: decoded
// 8-bit images (height x width x channels, RGB order when there are 3) with integer labels.
//   TensorImageSource  images already in memory (IDX, CIFAR)
//   ImageFolder        one sub-folder per class, any format OpenCV decodes
// load() may be called from several threads at once. A file that cannot be decoded throws
// ImageReadError naming it; the loader decides whether that skips the sample or stops the run.
#include <ATen/core/Tensor.h>

#include <memory>
#include <opencv2/core/mat.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace colossal::vit {

class ImageReadError : public std::runtime_error {
 public:
  ImageReadError(std::string where, const std::string& why)
      : std::runtime_error(where + ": " + why), where_(std::move(where)) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

class ImageSource {
 public:
  virtual ~ImageSource() = default;
  virtual int64_t size() const = 0;
  virtual int64_t label(int64_t index) const = 0;
  /// The decoded image, 8-bit, 1 or 3 channels (RGB). Throws ImageReadError.
  virtual cv::Mat load(int64_t index) const = 0;
  /// Where sample `index` comes from, for messages ("dir/cat/001.jpg", "file.gz#17").
  virtual std::string describe(int64_t index) const = 0;
  /// Channels of the images (1 grayscale, 3 colour).
  virtual int channels() const = 0;
  const std::vector<std::string>& class_names() const { return class_names_; }
  int64_t num_classes() const { return static_cast<int64_t>(class_names_.size()); }

 protected:
  std::vector<std::string> class_names_;
};

/// Images held as a uint8 tensor [N, H, W] (grayscale) or [N, C, H, W] (C = 1 or 3, RGB).
class TensorImageSource : public ImageSource {
 public:
  TensorImageSource(at::Tensor images, at::Tensor labels, std::vector<std::string> class_names,
                    std::string origin);
  int64_t size() const override { return labels_.size(0); }
  int64_t label(int64_t index) const override;
  cv::Mat load(int64_t index) const override;
  std::string describe(int64_t index) const override;
  int channels() const override { return static_cast<int>(images_.size(1)); }

 private:
  at::Tensor images_;  // [N, C, H, W] uint8, contiguous
  at::Tensor labels_;  // [N] int64
  std::string origin_;
};

/// The class names of Fashion-MNIST, CIFAR-10 (in label order).
std::vector<std::string> fashion_mnist_classes();
std::vector<std::string> cifar10_classes();

}  // namespace colossal::vit
