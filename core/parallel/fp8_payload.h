#pragma once
// FP8 payloads for the activations the parallel layers exchange (--fp8_communication, as
// ColossalAI's fp8_communication): each vector of a tensor's last dimension (a token's features)
// travels as one FP8 byte per value followed by its own fp32 scale, instead of 2 (bf16) or 4
// (fp32) bytes per value: half of bf16's bytes plus 4 per vector. The scale puts the vector's
// largest finite magnitude at the format's largest value (amp/fp8.h's current scaling, per
// vector, so that a few tokens of outsized activations do not push the others into FP8's
// subnormals): values saturate instead of overflowing, NaN stays NaN, and each value comes back
// within the format's rounding: |x' - x| <= 2^-4 |x| in e4m3 (2^-3 in e5m2), or half the smallest
// subnormal step over the scale for values below the normal range.
//
// Forward activations use e4m3, gradients e5m2 (the wider range). The receiver returns the
// sender's dtype.
//
// Which exchanges compress is the group handle's choice (dist::Group::fp8_payloads()): the
// *_payload functions compress on a tagged handle and are the exact collectives otherwise.
#include <ATen/core/Tensor.h>

#include <vector>

#include "core/amp/fp8.h"
#include "core/dist/group.h"

namespace colossal::parallel {

/// The bytes each chunk's scale adds (one fp32).
constexpr int64_t kFp8ScaleBytes = 4;

/// x as [rows, cols] (dimension 0 kept, the rest flattened) -> bytes [rows, cols + 4]: each row's
/// values in FP8 under the row's own scale, then the scale's four bytes.
at::Tensor pack_fp8_rows(const at::Tensor& x, amp::Fp8Format format);
/// The inverse: bytes [rows, cols + 4] -> values [rows, cols] in `dtype`.
at::Tensor unpack_fp8_rows(const at::Tensor& bytes, amp::Fp8Format format, c10::ScalarType dtype);

/// A tensor [rows, ...] as payload bytes [rows, fp8_row_bytes(sizes)]: each row of dimension 0
/// holds its vectors of the last dimension packed as above (a 1-D tensor: one vector per value).
at::Tensor pack_fp8(const at::Tensor& x, amp::Fp8Format format);
/// The inverse, into a tensor of `sizes` (sizes[0] = the bytes' rows) in `dtype`.
at::Tensor unpack_fp8(const at::Tensor& bytes, at::IntArrayRef sizes, amp::Fp8Format format, c10::ScalarType dtype);
/// The payload bytes of one row of dimension 0 of a tensor of `sizes`.
int64_t fp8_row_bytes(at::IntArrayRef sizes);

/// all_gather_along (gather_along.h); with FP8 payloads on a tagged handle.
at::Tensor all_gather_along_payload(const at::Tensor& x, int64_t dim, const dist::Group& g, amp::Fp8Format format);

/// dist::all_to_all of the rows of dimension 0 (`send_splits[r]` rows to rank r, `recv_splits[r]`
/// from it; empty: equal splits); with FP8 payloads on a tagged handle.
at::Tensor all_to_all_rows_payload(const at::Tensor& rows, const dist::Group& g, amp::Fp8Format format,
                                   const std::vector<int64_t>& recv_splits = {},
                                   const std::vector<int64_t>& send_splits = {});

}  // namespace colossal::parallel
