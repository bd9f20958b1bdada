#include "vit/data/image_folder.h"

#include <algorithm>
#include <filesystem>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <random>
#include <set>

#include "core/common/check.h"

namespace colossal::vit {
namespace fs = std::filesystem;

namespace {

bool is_image_extension(std::string ext) {
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  static const std::set<std::string> known = {".png", ".jpg",  ".jpeg", ".bmp", ".tif", ".tiff",
                                              ".webp", ".ppm", ".pgm",  ".pbm", ".pnm"};
  return known.count(ext) > 0;
}

bool hidden(const fs::path& p) { return !p.filename().empty() && p.filename().string()[0] == '.'; }

std::vector<fs::path> sorted_entries(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (!hidden(e.path())) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::shared_ptr<ImageFolder> ImageFolder::open(const std::string& dir, const Options& options) {
  COLOSSAL_CHECK(options.channels == 0 || options.channels == 1 || options.channels == 3,
                 "[image folder] channels: expected 0 (auto), 1 or 3, got ", options.channels);
  std::error_code ec;
  COLOSSAL_CHECK(fs::is_directory(dir, ec), "[image folder] '", dir, "' is not a directory");
  auto folder = std::shared_ptr<ImageFolder>(new ImageFolder());
  folder->root_ = dir;
  std::vector<fs::path> class_dirs;
  for (const auto& p : sorted_entries(dir))
    if (fs::is_directory(p)) class_dirs.push_back(p);
  COLOSSAL_CHECK(!class_dirs.empty(), "[image folder] '", dir,
                 "' has no sub-folders: expected one sub-folder of images per class (", dir, "/<class>/<image>)");
  folder->class_names_ = options.classes;
  if (folder->class_names_.empty())
    for (const auto& p : class_dirs) folder->class_names_.push_back(p.filename().string());
  for (const auto& p : class_dirs) {
    const std::string name = p.filename().string();
    auto it = std::find(folder->class_names_.begin(), folder->class_names_.end(), name);
    COLOSSAL_CHECK(it != folder->class_names_.end(), "[image folder] '", p.string(),
                   "': class '", name, "' is not one of the training classes");
    const int64_t label = it - folder->class_names_.begin();
    for (const auto& f : fs::recursive_directory_iterator(p)) {
      if (!f.is_regular_file() || hidden(f.path())) continue;
      if (!is_image_extension(f.path().extension().string())) {
        ++folder->ignored_;
        continue;
      }
      folder->files_.push_back(f.path().string());
      folder->labels_.push_back(label);
    }
  }
  // Sorted by path within the whole folder, so the order never depends on the file system.
  std::vector<size_t> order(folder->files_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return folder->files_[a] < folder->files_[b]; });
  std::vector<std::string> files;
  std::vector<int64_t> labels;
  for (size_t i : order) files.push_back(folder->files_[i]), labels.push_back(folder->labels_[i]);
  folder->files_ = std::move(files);
  folder->labels_ = std::move(labels);
  COLOSSAL_CHECK(!folder->files_.empty(), "[image folder] '", dir, "' has ", class_dirs.size(),
                 " class folders but no image files in them (extensions png, jpg, jpeg, bmp, tif, tiff, webp, "
                 "ppm, pgm, pbm, pnm)");

  folder->channels_ = options.channels;
  if (folder->channels_ == 0) {  // the first file that decodes decides
    folder->channels_ = 3;
    for (const auto& f : folder->files_) {
      cv::Mat m = cv::imread(f, cv::IMREAD_UNCHANGED);
      if (m.empty()) continue;
      folder->channels_ = m.channels() == 1 ? 1 : 3;
      break;
    }
  }
  return folder;
}

cv::Mat read_image(const std::string& path, int channels) {
  cv::Mat m;
  try {
    m = cv::imread(path, channels == 1 ? cv::IMREAD_GRAYSCALE : cv::IMREAD_COLOR);
  } catch (const cv::Exception& e) {
    throw ImageReadError(path, std::string("OpenCV could not decode it: ") + e.what());
  }
  if (m.empty()) {
    std::error_code ec;
    auto bytes = fs::file_size(path, ec);
    throw ImageReadError(path, ec ? "cannot be read (" + ec.message() + ")"
                                  : "not a decodable image (" + std::to_string(bytes) + " bytes)");
  }
  if (m.depth() != CV_8U) m.convertTo(m, CV_8U, m.depth() == CV_16U ? 1.0 / 257 : 1.0);
  if (channels == 3) cv::cvtColor(m, m, cv::COLOR_BGR2RGB);
  return m;
}

cv::Mat ImageFolder::load(int64_t index) const { return read_image(files_[index], channels_); }

SubsetSource::SubsetSource(std::shared_ptr<const ImageSource> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  class_names_ = base_->class_names();
}

std::pair<std::shared_ptr<ImageSource>, std::shared_ptr<ImageSource>> split_source(
    const std::shared_ptr<const ImageSource>& source, double held_out_fraction, uint64_t seed) {
  COLOSSAL_CHECK(held_out_fraction > 0 && held_out_fraction < 1, "[image folder] held-out fraction: expected in (0, 1), got ",
                 held_out_fraction);
  std::vector<std::vector<int64_t>> by_class(source->num_classes());
  for (int64_t i = 0; i < source->size(); ++i) by_class[source->label(i)].push_back(i);
  std::mt19937_64 rng(seed);
  std::vector<int64_t> train, held;
  for (auto& members : by_class) {
    std::shuffle(members.begin(), members.end(), rng);
    const auto n = static_cast<int64_t>(members.size());
    int64_t h = n >= 2 ? std::max<int64_t>(1, static_cast<int64_t>(held_out_fraction * n + 0.5)) : 0;
    held.insert(held.end(), members.begin(), members.begin() + h);
    train.insert(train.end(), members.begin() + h, members.end());
  }
  std::sort(train.begin(), train.end());
  std::sort(held.begin(), held.end());
  return {std::make_shared<SubsetSource>(source, train), std::make_shared<SubsetSource>(source, held)};
}

}  // namespace colossal::vit
