#pragma once
// The CIFAR binary format: fixed-size records, each one label byte (CIFAR-10) or a coarse and a
// fine label byte (CIFAR-100) followed by 3 x 32 x 32 pixel bytes (red, green, blue planes).
// A file whose size is not a whole number of records, or a label outside the class range, is an
// error naming the file and the record.
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace colossal::vit {

struct CifarDataset {
  at::Tensor images;  // [N, 3, 32, 32] uint8
  at::Tensor labels;  // [N] int64 (CIFAR-100: the fine label)
};

/// `classes` 10 (CIFAR-10) or 100 (CIFAR-100); several batch files are concatenated.
CifarDataset read_cifar(const std::vector<std::string>& files, int classes = 10);

}  // namespace colossal::vit
