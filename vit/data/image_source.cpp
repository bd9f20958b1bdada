#include "vit/data/image_source.h"

#include <ATen/ATen.h>

#include <cstring>
#include <opencv2/core.hpp>

#include "core/common/check.h"

namespace colossal::vit {

TensorImageSource::TensorImageSource(at::Tensor images, at::Tensor labels, std::vector<std::string> class_names,
                                     std::string origin)
    : origin_(std::move(origin)) {
  if (images.dim() == 3) images = images.unsqueeze(1);
  COLOSSAL_CHECK(images.dim() == 4 && images.scalar_type() == at::kByte && (images.size(1) == 1 || images.size(1) == 3),
                 "[images] ", origin_, ": expected uint8 images [N, H, W] or [N, 1|3, H, W], got ",
                 images.scalar_type(), " ", images.sizes());
  COLOSSAL_CHECK(labels.dim() == 1 && labels.size(0) == images.size(0), "[images] ", origin_, ": ", images.size(0),
                 " images but labels of shape ", labels.sizes());
  images_ = images.contiguous();
  labels_ = labels.to(at::kLong).contiguous();
  class_names_ = std::move(class_names);
  if (class_names_.empty()) {
    int64_t classes = labels_.numel() ? labels_.max().item<int64_t>() + 1 : 0;
    for (int64_t c = 0; c < classes; ++c) class_names_.push_back(std::to_string(c));
  }
  if (labels_.numel()) {
    int64_t lo = labels_.min().item<int64_t>(), hi = labels_.max().item<int64_t>();
    COLOSSAL_CHECK(lo >= 0 && hi < num_classes(), "[images] ", origin_, ": labels span ", lo, "..", hi,
                   " but there are ", num_classes(), " classes");
  }
}

int64_t TensorImageSource::label(int64_t index) const { return labels_.data_ptr<int64_t>()[index]; }

cv::Mat TensorImageSource::load(int64_t index) const {
  const int c = channels(), h = static_cast<int>(images_.size(2)), w = static_cast<int>(images_.size(3));
  const uint8_t* src = images_.data_ptr<uint8_t>() + index * c * h * w;
  cv::Mat out(h, w, CV_8UC(c));
  if (c == 1) {
    std::memcpy(out.data, src, static_cast<size_t>(h) * w);
  } else {  // planes -> interleaved
    for (int y = 0; y < h; ++y) {
      uint8_t* row = out.ptr<uint8_t>(y);
      for (int x = 0; x < w; ++x)
        for (int k = 0; k < c; ++k) row[x * c + k] = src[(k * h + y) * w + x];
    }
  }
  return out;
}

std::string TensorImageSource::describe(int64_t index) const { return origin_ + "#" + std::to_string(index); }

std::vector<std::string> fashion_mnist_classes() {
  return {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
}

std::vector<std::string> cifar10_classes() {
  return {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
}

}  // namespace colossal::vit
