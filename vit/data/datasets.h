#pragma once
// Training and evaluation images by name or directory, as train_vit takes them:
//   "fashion-mnist"  the copy setup fetched (60,000 training, 10,000 test images)
//   DIR with IDX files       train-images-idx3-ubyte[.gz] + train-labels-idx1-ubyte[.gz], and
//                            t10k-* (or test-*) for evaluation
//   DIR with CIFAR binaries  data_batch_*.bin + test_batch.bin (CIFAR-10) or train.bin + test.bin
//                            (CIFAR-100)
//   DIR of images            DIR/train/<class>/ and DIR/val|valid|validation|test/<class>/, or
//                            DIR/<class>/ with a seeded, per-class held-out split
#include <memory>
#include <string>

#include "vit/data/image_source.h"

namespace colossal::vit {

struct DatasetOptions {
  int channels = 0;               // image folders: 1 or 3; 0: from the files
  double held_out_fraction = 0.1;  // DIR/<class>/ layouts
  uint64_t seed = 0;
};

struct Datasets {
  std::shared_ptr<ImageSource> train, eval;
  std::string description;  // for the run's header line
};

Datasets open_datasets(const std::string& name_or_dir, const DatasetOptions& options = {});

}  // namespace colossal::vit
