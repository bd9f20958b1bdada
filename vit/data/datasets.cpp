#include "vit/data/datasets.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "core/common/check.h"
#include "vit/data/cifar.h"
#include "vit/data/idx.h"
#include "vit/data/image_folder.h"

namespace colossal::vit {
namespace fs = std::filesystem;

namespace {

// The first of `names` (with or without .gz) that exists in dir; empty if none.
std::string find_file(const std::string& dir, const std::vector<std::string>& names) {
  for (const auto& n : names)
    for (const std::string suffix : {"", ".gz"})
      if (fs::is_regular_file(dir + "/" + n + suffix)) return dir + "/" + n + suffix;
  return "";
}

std::shared_ptr<ImageSource> idx_source(const IdxDataset& d, const std::string& origin,
                                        std::vector<std::string> classes) {
  return std::make_shared<TensorImageSource>(d.images, d.labels, std::move(classes), origin);
}

std::string count_line(const Datasets& d) {
  std::ostringstream s;
  s << d.train->size() << " training and " << d.eval->size() << " evaluation images, " << d.train->num_classes()
    << " classes, " << d.train->channels() << " channel(s)";
  return s.str();
}

}  // namespace

Datasets open_datasets(const std::string& spec, const DatasetOptions& options) {
  Datasets out;
  if (spec == "fashion-mnist") {
    std::string dir = default_fashion_mnist_dir();
    COLOSSAL_CHECK(fs::is_directory(dir), "[data] Fashion-MNIST is not at ", dir,
                   " — scripts/setup.sh fetches it (Debian's dataset-fashion-mnist)");
    auto train = fashion_mnist("train"), test = fashion_mnist("test");
    out.train = idx_source(train, dir + "/train-images-idx3-ubyte.gz", fashion_mnist_classes());
    out.eval = idx_source(test, dir + "/t10k-images-idx3-ubyte.gz", fashion_mnist_classes());
    out.description = "Fashion-MNIST: " + count_line(out);
    return out;
  }
  std::error_code ec;
  COLOSSAL_CHECK(fs::is_directory(spec, ec), "[data] '", spec,
                 "' is neither a built-in dataset (fashion-mnist) nor a directory");

  // IDX (MNIST-style) files.
  std::string train_images = find_file(spec, {"train-images-idx3-ubyte", "train-images.idx3-ubyte"});
  if (!train_images.empty()) {
    std::string train_labels = find_file(spec, {"train-labels-idx1-ubyte", "train-labels.idx1-ubyte"});
    std::string test_images = find_file(spec, {"t10k-images-idx3-ubyte", "test-images-idx3-ubyte", "t10k-images.idx3-ubyte"});
    std::string test_labels = find_file(spec, {"t10k-labels-idx1-ubyte", "test-labels-idx1-ubyte", "t10k-labels.idx1-ubyte"});
    COLOSSAL_CHECK(!train_labels.empty() && !test_images.empty() && !test_labels.empty(), "[data] '", spec,
                   "' has ", train_images, " but not all of train-labels-idx1-ubyte, t10k-images-idx3-ubyte and "
                   "t10k-labels-idx1-ubyte (each optionally .gz)");
    auto train = read_idx_pair(train_images, train_labels), test = read_idx_pair(test_images, test_labels);
    out.train = idx_source(train, train_images, {});
    out.eval = idx_source(test, test_images, out.train->class_names());
    out.description = "IDX files in " + spec + ": " + count_line(out);
    return out;
  }

  // CIFAR binaries.
  std::vector<std::string> batches;
  for (int i = 1; i <= 5; ++i)
    if (fs::is_regular_file(spec + "/data_batch_" + std::to_string(i) + ".bin"))
      batches.push_back(spec + "/data_batch_" + std::to_string(i) + ".bin");
  const bool cifar100 = fs::is_regular_file(spec + "/train.bin");
  if (!batches.empty() || cifar100) {
    const int classes = cifar100 ? 100 : 10;
    if (cifar100) batches = {spec + "/train.bin"};
    std::string test_file = spec + (cifar100 ? "/test.bin" : "/test_batch.bin");
    COLOSSAL_CHECK(fs::is_regular_file(test_file), "[data] '", spec, "' holds CIFAR training batches but no ",
                   test_file);
    auto train = read_cifar(batches, classes), test = read_cifar({test_file}, classes);
    std::vector<std::string> names = classes == 10 ? cifar10_classes() : std::vector<std::string>{};
    if (names.empty())
      for (int c = 0; c < classes; ++c) names.push_back(std::to_string(c));
    out.train = std::make_shared<TensorImageSource>(train.images, train.labels, names, batches.front());
    out.eval = std::make_shared<TensorImageSource>(test.images, test.labels, names, test_file);
    out.description = std::string(cifar100 ? "CIFAR-100" : "CIFAR-10") + " in " + spec + ": " + count_line(out);
    return out;
  }

  // Image folders.
  ImageFolder::Options fo;
  fo.channels = options.channels;
  if (fs::is_directory(spec + "/train")) {
    auto train = ImageFolder::open(spec + "/train", fo);
    std::string eval_dir;
    for (const char* name : {"val", "valid", "validation", "test"})
      if (fs::is_directory(spec + "/" + name)) {
        eval_dir = spec + "/" + name;
        break;
      }
    COLOSSAL_CHECK(!eval_dir.empty(), "[data] '", spec, "' has train/ but no val/, valid/, validation/ or test/ folder");
    fo.classes = train->class_names();
    fo.channels = train->channels();
    out.train = train;
    out.eval = ImageFolder::open(eval_dir, fo);
    out.description = "image folders " + spec + "/train and " + eval_dir + ": " + count_line(out);
    if (train->ignored_files()) out.description += " (" + std::to_string(train->ignored_files()) + " non-image files ignored)";
    return out;
  }
  auto all = ImageFolder::open(spec, fo);
  auto [train, held] = split_source(all, options.held_out_fraction, options.seed);
  out.train = train;
  out.eval = held;
  std::ostringstream s;
  s << "image folder " << spec << " (" << options.held_out_fraction * 100 << "% of each class held out): ";
  out.description = s.str() + count_line(out);
  if (all->ignored_files()) out.description += " (" + std::to_string(all->ignored_files()) + " non-image files ignored)";
  return out;
}

}  // namespace colossal::vit
