#include "core/offload/transfer_stream.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <optional>

namespace colossal::offload {

at::TensorOptions host_options(const c10::Device& device, c10::ScalarType dtype) {
  return at::TensorOptions().dtype(dtype).device(c10::kCPU).pinned_memory(!device.is_cpu());
}

struct Fence::State {
  c10::Event event;
  explicit State(c10::DeviceType type) : event(type) {}
};

Fence::Fence() = default;
Fence::~Fence() = default;
Fence::Fence(Fence&&) noexcept = default;
Fence& Fence::operator=(Fence&&) noexcept = default;

struct TransferStream::Side {
  c10::Stream stream;
};

TransferStream::TransferStream(c10::Device device) : device_(device) {
  if (device_.is_cpu()) return;
  c10::impl::VirtualGuardImpl impl(device_.type());
  side_ = std::make_unique<Side>(Side{impl.getStreamFromGlobalPool(device_)});
}

TransferStream::~TransferStream() = default;

Fence TransferStream::copy(const at::Tensor& dst, const at::Tensor& src) {
  ++copies_;
  bytes_ += static_cast<int64_t>(src.numel() * src.element_size());
  Fence fence;
  if (!side_) {
    dst.copy_(src);
    return fence;
  }
  c10::impl::VirtualGuardImpl impl(device_.type());
  // The side stream starts after what the compute stream queued so far (the data to copy may be
  // its output), then runs on its own.
  c10::Event ready(device_.type());
  ready.record(impl.getStream(device_));
  ready.block(side_->stream);
  {
    c10::StreamGuard guard(side_->stream);
    dst.copy_(src, /*non_blocking=*/true);
  }
  for (const auto* t : {&dst, &src})
    if (t->device() == device_) t->record_stream(side_->stream);
  fence.state_ = std::make_unique<Fence::State>(device_.type());
  fence.state_->event.record(side_->stream);
  return fence;
}

void TransferStream::wait_on_device(Fence& fence) {
  if (!fence.state_) return;
  c10::impl::VirtualGuardImpl impl(device_.type());
  fence.state_->event.block(impl.getStream(device_));
  fence.state_.reset();
}

void TransferStream::wait_on_host(Fence& fence) {
  if (!fence.state_) return;
  fence.state_->event.synchronize();
  fence.state_.reset();
}

}  // namespace colossal::offload
