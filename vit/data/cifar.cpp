#include "vit/data/cifar.h"

#include <ATen/ATen.h>

#include <fstream>

#include "core/common/check.h"

namespace colossal::vit {

CifarDataset read_cifar(const std::vector<std::string>& files, int classes) {
  COLOSSAL_CHECK(classes == 10 || classes == 100, "[cifar] classes: expected 10 or 100, got ", classes);
  COLOSSAL_CHECK(!files.empty(), "[cifar] no files given");
  const int64_t label_bytes = classes == 10 ? 1 : 2, pixels = 3 * 32 * 32, record = label_bytes + pixels;
  std::vector<at::Tensor> images, labels;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    COLOSSAL_CHECK(in.good(), "[cifar] cannot open '", path, "'");
    const int64_t size = in.tellg();
    COLOSSAL_CHECK(size > 0 && size % record == 0, "[cifar] '", path, "': ", size, " bytes is not a whole number of ",
                   record, "-byte CIFAR-", classes, " records");
    const int64_t n = size / record;
    auto raw = at::empty({n, record}, at::kByte);
    in.seekg(0);
    in.read(reinterpret_cast<char*>(raw.data_ptr()), size);
    COLOSSAL_CHECK(in.good(), "[cifar] '", path, "': read failed");
    auto lab = raw.select(1, label_bytes - 1).to(at::kLong);
    auto bad = lab.ge(classes).nonzero();
    COLOSSAL_CHECK(bad.numel() == 0, "[cifar] '", path, "': record ", bad.numel() ? bad[0][0].item<int64_t>() : 0,
                   " has label ", bad.numel() ? lab[bad[0][0]].item<int64_t>() : 0, ", outside [0, ", classes, ")");
    images.push_back(raw.narrow(1, label_bytes, pixels).reshape({n, 3, 32, 32}));
    labels.push_back(lab);
  }
  return {at::cat(images), at::cat(labels)};
}

}  // namespace colossal::vit
