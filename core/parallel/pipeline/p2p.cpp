#include "core/parallel/pipeline/p2p.h"

#include <ATen/ATen.h>

#include "core/common/check.h"
#include "core/parallel/fp8_payload.h"

namespace colossal::parallel::pipeline {
namespace {

constexpr int kMaxDims = 8;
constexpr int kMetaTag = 1 << 29;  // metadata tags sit above every data tag

int data_tag(const Channel& c) { return (c.microbatch * 4096 + c.virtual_stage) * 2 + static_cast<int>(c.direction); }

std::string describe(const Channel& c) {
  return std::string(c.direction == Direction::kForward ? "the activation into" : "the gradient out of") +
         " virtual stage " + std::to_string(c.virtual_stage) + ", microbatch " + std::to_string(c.microbatch);
}

// --fp8_communication (a pipeline group tagged for FP8 payloads): floating-point messages travel
// as FP8 with a scale per token (fp8_payload.h), activations in e4m3 and gradients in e5m2. Both ends know the
// tag and the dtype, so the header stays the same.
bool compressed(const dist::Group& g, c10::ScalarType dtype) { return g.fp8_payloads() && at::isFloatingType(dtype); }
amp::Fp8Format format_of(const Channel& c) {
  return c.direction == Direction::kForward ? amp::Fp8Format::kE4M3 : amp::Fp8Format::kE5M2;
}

std::string shape_text(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

void StageLink::send(const at::Tensor& tensor, int peer, const Channel& channel) {
  auto t = tensor.detach().contiguous();
  COLOSSAL_CHECK(channel.microbatch < (1 << 16) && channel.virtual_stage < 4096, "[pipeline] ", describe(channel),
                 ": too many microbatches or stages for the message tags");
  auto it = sent_.find(key(channel));
  if (it == sent_.end()) {
    COLOSSAL_CHECK(t.dim() <= kMaxDims, "[pipeline] ", describe(channel), " has ", t.dim(), " dimensions; at most ",
                   kMaxDims, " travel between stages");
    auto header = at::zeros({kMaxDims + 2}, at::kLong);
    header[0] = static_cast<int64_t>(t.scalar_type());
    header[1] = t.dim();
    for (int64_t d = 0; d < t.dim(); ++d) header[2 + d] = t.size(d);
    in_flight_.emplace_back(dist::send_async(header, peer, group_, kMetaTag + key(channel)), header);
    sent_[key(channel)] = {t.sizes().vec(), t.scalar_type()};
  } else {
    COLOSSAL_CHECK(t.sizes().vec() == it->second.shape && t.scalar_type() == it->second.dtype, "[pipeline] ",
                   describe(channel), " has shape ", shape_text(t.sizes()), " but the first microbatch's was ",
                   shape_text(it->second.shape), ": every microbatch must have the same shape");
  }
  if (compressed(group_, t.scalar_type())) t = pack_fp8(t.dim() == 0 ? t.reshape({1}) : t, format_of(channel));
  in_flight_.emplace_back(dist::send_async(t, peer, group_, data_tag(channel)), t);
}

at::Tensor StageLink::recv(int peer, const Channel& channel) {
  try {
    auto it = received_.find(key(channel));
    if (it == received_.end()) {
      auto header = at::empty({kMaxDims + 2}, at::kLong);
      dist::recv(header, peer, group_, kMetaTag + key(channel));
      Meta m;
      m.dtype = static_cast<c10::ScalarType>(header[0].item<int64_t>());
      for (int64_t d = 0; d < header[1].item<int64_t>(); ++d) m.shape.push_back(header[2 + d].item<int64_t>());
      it = received_.emplace(key(channel), m).first;
    }
    const auto& meta = it->second;
    if (compressed(group_, meta.dtype)) {
      const std::vector<int64_t> shape = meta.shape.empty() ? std::vector<int64_t>{1} : meta.shape;
      auto bytes = at::empty({shape[0], fp8_row_bytes(shape)}, at::kByte);
      dist::recv(bytes, peer, group_, data_tag(channel));
      return unpack_fp8(bytes, shape, format_of(channel), meta.dtype).reshape(meta.shape);
    }
    auto t = at::empty(meta.shape, at::TensorOptions().dtype(meta.dtype));
    dist::recv(t, peer, group_, data_tag(channel));
    return t;
  } catch (const c10::Error& e) {
    COLOSSAL_FAIL("[pipeline] pipeline rank ", group_.rank(), " waiting for ", describe(channel), " from pipeline rank ",
                  peer, ": ", e.what_without_backtrace());
  }
}

void StageLink::wait_sends() {
  for (auto& [handle, tensor] : in_flight_) handle.wait();
  in_flight_.clear();
}

}  // namespace colossal::parallel::pipeline
