#pragma once
// TransferStream: copies between the tiers of a device's memory hierarchy — the device, pinned
// host memory — that run beside the computation instead of in line with it.
//
// On a CUDA device each copy is issued on a side stream (non_blocking, from or into pinned host
// memory) and returns a Fence. The consumer waits for the fence where the data is needed:
// `wait_on_device` makes the compute stream wait (the host carries on, so an all-gather or a
// kernel queued after it sees the data), `wait_on_host` blocks the host (before a CPU optimizer
// reads a gradient copied down). Tensors a side-stream copy touches are recorded on that stream,
// so the caching allocator does not hand their memory out while the copy is in flight.
//
// On the CPU there is one tier: copies run in line and fences are complete at once. The code
// that drives tiers is the same on both, so the CPU tests run its logic.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <memory>

namespace colossal::offload {

/// Options for a host buffer that copies to and from `device` asynchronously: pinned (page
/// locked) when the device is a GPU, ordinary CPU memory otherwise.
at::TensorOptions host_options(const c10::Device& device, c10::ScalarType dtype);

class Fence {
 public:
  Fence();
  ~Fence();
  Fence(Fence&&) noexcept;
  Fence& operator=(Fence&&) noexcept;
  bool pending() const { return state_ != nullptr; }

 private:
  friend class TransferStream;
  struct State;
  std::unique_ptr<State> state_;
};

class TransferStream {
 public:
  explicit TransferStream(c10::Device device);
  ~TransferStream();
  TransferStream(const TransferStream&) = delete;
  TransferStream& operator=(const TransferStream&) = delete;

  const c10::Device& device() const { return device_; }
  /// Copies `src` into `dst` (any devices, converting the dtype) on the side stream.
  Fence copy(const at::Tensor& dst, const at::Tensor& src);
  /// Later work on the compute stream waits for the copy; the host does not.
  void wait_on_device(Fence& fence);
  /// The host waits for the copy.
  void wait_on_host(Fence& fence);
  int64_t copies() const { return copies_; }
  int64_t bytes() const { return bytes_; }

 private:
  c10::Device device_;
  struct Side;
  std::unique_ptr<Side> side_;  // null on the CPU
  int64_t copies_ = 0, bytes_ = 0;
};

}  // namespace colossal::offload
