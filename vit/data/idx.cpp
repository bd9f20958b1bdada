#include "vit/data/idx.h"

#include <ATen/ATen.h>
#include <zlib.h>

#include <memory>
#include <vector>

#include "core/common/check.h"
#include "core/common/env.h"

namespace colossal::vit {
namespace {

// gzread reads plain files as they are, so one reader serves both.
struct GzFile {
  explicit GzFile(const std::string& path) : path(path), f(gzopen(path.c_str(), "rb")) {
    COLOSSAL_CHECK(f != nullptr, "[idx] cannot open '", path, "'");
  }
  ~GzFile() {
    if (f) gzclose(f);
  }
  // Reads exactly n bytes; `what` names them in the error.
  void read(void* dst, size_t n, const char* what) {
    size_t done = 0;
    while (done < n) {
      int got = gzread(f, static_cast<char*>(dst) + done, static_cast<unsigned>(std::min<size_t>(n - done, 1 << 30)));
      COLOSSAL_CHECK(got > 0, "[idx] '", path, "': truncated while reading ", what, " (", done, " of ", n,
                     " bytes)");
      done += static_cast<size_t>(got);
    }
  }
  bool at_end() {
    char c;
    return gzread(f, &c, 1) == 0;
  }
  std::string path;
  gzFile f;
};

uint32_t big_endian(const unsigned char* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

}  // namespace

at::Tensor read_idx(const std::string& path) {
  GzFile in(path);
  unsigned char magic[4];
  in.read(magic, 4, "the magic number");
  COLOSSAL_CHECK(magic[0] == 0 && magic[1] == 0, "[idx] '", path, "': not an IDX file (magic starts ",
                 int(magic[0]), " ", int(magic[1]), ", expected 0 0)");
  at::ScalarType dtype;
  size_t element = 1;
  switch (magic[2]) {
    case 0x08: dtype = at::kByte; break;
    case 0x09: dtype = at::kChar; break;
    case 0x0B: dtype = at::kShort, element = 2; break;
    case 0x0C: dtype = at::kInt, element = 4; break;
    case 0x0D: dtype = at::kFloat, element = 4; break;
    case 0x0E: dtype = at::kDouble, element = 8; break;
    default: COLOSSAL_FAIL("[idx] '", path, "': unknown element type 0x", std::hex, int(magic[2]));
  }
  const int dims = magic[3];
  COLOSSAL_CHECK(dims >= 1 && dims <= 4, "[idx] '", path, "': ", dims, " dimensions (expected 1 to 4)");
  std::vector<int64_t> shape;
  int64_t total = 1;
  for (int d = 0; d < dims; ++d) {
    unsigned char b[4];
    in.read(b, 4, "the dimension sizes");
    shape.push_back(big_endian(b));
    total *= shape.back();
  }
  COLOSSAL_CHECK(total <= (int64_t{1} << 34), "[idx] '", path, "': ", total, " elements is implausibly large");
  auto t = at::empty(shape, at::TensorOptions().dtype(dtype));
  in.read(t.data_ptr(), static_cast<size_t>(total) * element, "the data");
  COLOSSAL_CHECK(in.at_end(), "[idx] '", path, "': bytes after the ", total, " elements the header announces");
  if (element > 1) {  // IDX is big-endian
    auto bytes = t.view(at::kByte).view({total, static_cast<int64_t>(element)});
    t = bytes.flip(1).contiguous().view(dtype).view(shape);
  }
  return t;
}

IdxDataset read_idx_pair(const std::string& images_path, const std::string& labels_path) {
  auto images = read_idx(images_path);
  auto labels = read_idx(labels_path);
  COLOSSAL_CHECK(images.dim() == 3 && images.scalar_type() == at::kByte, "[idx] '", images_path,
                 "': expected unsigned-byte images [N, rows, cols], got ", images.scalar_type(), " ", images.sizes());
  COLOSSAL_CHECK(labels.dim() == 1, "[idx] '", labels_path, "': expected labels [N], got ", labels.sizes());
  COLOSSAL_CHECK(images.size(0) == labels.size(0), "[idx] '", images_path, "' has ", images.size(0), " images but '",
                 labels_path, "' has ", labels.size(0), " labels");
  return {images, labels.to(at::kLong)};
}

std::string default_fashion_mnist_dir() { return cache_root() + "/corpus/fashion-mnist/usr/share/datasets/fashion-mnist"; }

IdxDataset fashion_mnist(const std::string& split) {
  COLOSSAL_CHECK(split == "train" || split == "test", "[idx] Fashion-MNIST split: expected train or test, got '",
                 split, "'");
  std::string d = default_fashion_mnist_dir(), p = split == "train" ? "train" : "t10k";
  return read_idx_pair(d + "/" + p + "-images-idx3-ubyte.gz", d + "/" + p + "-labels-idx1-ubyte.gz");
}

}  // namespace colossal::vit
