#pragma once
// An image-folder dataset: DIR/<class>/<image>, classes in sorted folder-name order, images in
// sorted file-name order, any format OpenCV decodes (chosen by extension: png, jpg, jpeg, bmp,
// tif, tiff, webp, ppm, pgm, pbm, pnm). Hidden files are ignored; other files are counted and
// reported, not read. Decoding happens in load(), so a corrupt file surfaces when the loader
// reaches it, as an ImageReadError naming the path.
#include <memory>
#include <string>
#include <vector>

#include "vit/data/image_source.h"

namespace colossal::vit {

/// One image file decoded to 8 bits with `channels` (1, or 3 in RGB order); ImageReadError
/// naming the file when it cannot be.
cv::Mat read_image(const std::string& path, int channels);

class ImageFolder : public ImageSource {
 public:
  struct Options {
    int channels = 0;  // 1 or 3; 0: from the first image that decodes (grayscale files -> 1)
    // Class names to use (a validation folder follows its training folder's classes); empty:
    // the sub-folders found. A sub-folder that is not among them is an error.
    std::vector<std::string> classes;
  };
  static std::shared_ptr<ImageFolder> open(const std::string& dir, const Options& options);

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  int64_t label(int64_t index) const override { return labels_[index]; }
  cv::Mat load(int64_t index) const override;
  std::string describe(int64_t index) const override { return files_[index]; }
  int channels() const override { return channels_; }
  /// Files under the class folders that were not images by their extension.
  int64_t ignored_files() const { return ignored_; }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
  std::vector<std::string> files_;
  std::vector<int64_t> labels_;
  int channels_ = 3;
  int64_t ignored_ = 0;
};

/// A view of some samples of another source (a held-out split).
class SubsetSource : public ImageSource {
 public:
  SubsetSource(std::shared_ptr<const ImageSource> base, std::vector<int64_t> indices);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  int64_t label(int64_t i) const override { return base_->label(indices_[i]); }
  cv::Mat load(int64_t i) const override { return base_->load(indices_[i]); }
  std::string describe(int64_t i) const override { return base_->describe(indices_[i]); }
  int channels() const override { return base_->channels(); }

 private:
  std::shared_ptr<const ImageSource> base_;
  std::vector<int64_t> indices_;
};

/// Splits `source` into (train, held-out) with `held_out_fraction` of every class held out,
/// chosen by `seed`.
std::pair<std::shared_ptr<ImageSource>, std::shared_ptr<ImageSource>> split_source(
    const std::shared_ptr<const ImageSource>& source, double held_out_fraction, uint64_t seed);

}  // namespace colossal::vit
