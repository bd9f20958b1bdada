#pragma once
// The IDX format of MNIST and Fashion-MNIST, gzip-compressed or plain: a big-endian header
// (two zero bytes, a type byte, the number of dimensions, then each dimension as a 32-bit
// size) followed by the values. Images are unsigned bytes [N, rows, cols]; labels [N].
// Every inconsistency is an error naming the file and what was expected.
#include <ATen/core/Tensor.h>

#include <string>

namespace colossal::vit {

/// Any IDX file as a tensor (uint8, int8, int16, int32, float32 or float64 by its type byte).
at::Tensor read_idx(const std::string& path);

struct IdxDataset {
  at::Tensor images;  // [N, H, W] uint8
  at::Tensor labels;  // [N] int64
};

/// An images file and a labels file that belong together (counts must agree).
IdxDataset read_idx_pair(const std::string& images_path, const std::string& labels_path);

/// Fashion-MNIST from the cache setup fills (Debian's dataset-fashion-mnist): "train" (60,000
/// images) or "test" (10,000).
IdxDataset fashion_mnist(const std::string& split);
std::string default_fashion_mnist_dir();

}  // namespace colossal::vit
