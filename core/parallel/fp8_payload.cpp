#include "core/parallel/fp8_payload.h"

#include <ATen/ATen.h>

#include <numeric>

#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/parallel/gather_along.h"

namespace colossal::parallel {
namespace {

bool spans(const dist::Group& g) { return g.is_member() && g.size() > 1; }

// A tensor as [rows, vectors a row, vector length] (the vectors of its last dimension).
struct Vectors {
  int64_t rows = 1, per_row = 1, length = 1;
};

Vectors vectors_of(at::IntArrayRef sizes) {
  Vectors v;
  if (sizes.empty()) return v;
  v.rows = sizes[0];
  if (sizes.size() == 1) return v;
  v.length = sizes.back();
  for (size_t d = 1; d + 1 < sizes.size(); ++d) v.per_row *= sizes[d];
  return v;
}

}  // namespace

at::Tensor pack_fp8_rows(const at::Tensor& x, amp::Fp8Format format) {
  COLOSSAL_CHECK(at::isFloatingType(x.scalar_type()), "[fp8] FP8 payloads carry floating-point values, got ",
                 x.scalar_type());
  const int64_t rows = x.dim() == 0 ? 1 : x.size(0);
  int64_t cols = 1;
  for (int64_t d = 1; d < x.dim(); ++d) cols *= x.size(d);
  auto xf = x.detach().to(at::kFloat).reshape({rows, cols});
  const double max = amp::fp8_max(format);
  // Each row's largest finite magnitude (NaN and infinities do not set the scale; they stay NaN
  // and saturate): a row of zeros or of non-finite values keeps scale 1.
  auto amax = cols == 0 ? at::zeros({rows}, at::kFloat) : at::nan_to_num(xf.abs(), 0.0, 0.0, 0.0).amax(1);
  auto scale = at::where(amax > 0, max / amax, at::ones_like(amax));
  auto q = (xf * scale.unsqueeze(1)).clamp(-max, max).to(amp::fp8_dtype(format));
  auto scale_bytes = scale.contiguous().view(at::kByte).reshape({rows, kFp8ScaleBytes});
  return at::cat({q.view(at::kByte), scale_bytes}, 1);
}

at::Tensor unpack_fp8_rows(const at::Tensor& bytes, amp::Fp8Format format, c10::ScalarType dtype) {
  COLOSSAL_CHECK(bytes.dim() == 2 && bytes.scalar_type() == at::kByte && bytes.size(1) >= kFp8ScaleBytes,
                 "[fp8] an FP8 payload is bytes [rows, values + 4], got ", bytes.sizes(), " ", bytes.scalar_type());
  const int64_t cols = bytes.size(1) - kFp8ScaleBytes;
  auto values = bytes.narrow(1, 0, cols).contiguous().view(amp::fp8_dtype(format)).to(at::kFloat);
  auto scale = bytes.narrow(1, cols, kFp8ScaleBytes).contiguous().view(at::kFloat);  // [rows, 1]
  return (values / scale).to(dtype);
}

int64_t fp8_row_bytes(at::IntArrayRef sizes) {
  const auto v = vectors_of(sizes);
  return v.length == 0 ? 0 : v.per_row * (v.length + kFp8ScaleBytes);
}

at::Tensor pack_fp8(const at::Tensor& x, amp::Fp8Format format) {
  const auto v = vectors_of(x.sizes());
  if (v.length == 0 || v.per_row == 0) return at::empty({v.rows, 0}, at::kByte);
  return pack_fp8_rows(x.reshape({v.rows * v.per_row, v.length}), format).view({v.rows, fp8_row_bytes(x.sizes())});
}

at::Tensor unpack_fp8(const at::Tensor& bytes, at::IntArrayRef sizes, amp::Fp8Format format, c10::ScalarType dtype) {
  const auto v = vectors_of(sizes);
  COLOSSAL_CHECK(bytes.dim() == 2 && bytes.size(0) == v.rows && bytes.size(1) == fp8_row_bytes(sizes),
                 "[fp8] a payload of ", bytes.sizes(), " bytes does not hold a tensor of ", sizes);
  if (v.length == 0 || v.per_row == 0) return at::zeros(sizes, at::TensorOptions().dtype(dtype));
  return unpack_fp8_rows(bytes.reshape({v.rows * v.per_row, v.length + kFp8ScaleBytes}), format, dtype)
      .reshape(sizes);
}

at::Tensor all_gather_along_payload(const at::Tensor& x, int64_t dim, const dist::Group& g, amp::Fp8Format format) {
  if (!g.fp8_payloads() || !spans(g)) return spans(g) ? all_gather_along(x, dim, g) : x;
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  auto moved = x.movedim(d, 0).contiguous();
  // The gathered rows of dimension 0 are the ranks' rows in rank order, each with its vectors.
  auto mine = pack_fp8(moved, format);
  auto all = at::empty({g.size() * mine.size(0), mine.size(1)}, mine.options());
  dist::all_gather(all, mine, g);
  auto sizes = moved.sizes().vec();
  sizes[0] *= g.size();
  return unpack_fp8(all, sizes, format, x.scalar_type()).movedim(0, d).contiguous();
}

at::Tensor all_to_all_rows_payload(const at::Tensor& rows, const dist::Group& g, amp::Fp8Format format,
                                   const std::vector<int64_t>& recv_splits, const std::vector<int64_t>& send_splits) {
  auto in = rows.contiguous();
  auto sizes = in.sizes().vec();
  if (!recv_splits.empty()) sizes[0] = std::accumulate(recv_splits.begin(), recv_splits.end(), int64_t{0});
  if (!g.fp8_payloads()) {
    auto out = at::empty(sizes, in.options());
    dist::all_to_all(out, in, g, recv_splits, send_splits);
    return out;
  }
  auto packed = pack_fp8(in, format);
  auto arrived = at::empty({sizes[0], packed.size(1)}, packed.options());
  dist::all_to_all(arrived, packed, g, recv_splits, send_splits);
  return unpack_fp8(arrived, sizes, format, in.scalar_type());
}

}  // namespace colossal::parallel
