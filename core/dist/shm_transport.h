#pragma once
// Collectives through shared memory for a group whose members all run on this host.
//
// Gloo moves CPU tensors over TCP loopback: every byte is copied through the kernel several
// times and summed by Gloo's own threads, which on a small machine compete with the training
// threads for the same cores. Here the members map one shared segment and every byte is
// touched a few times by plain memcpy and ATen adds:
//   all_reduce      each member copies a chunk in, reduces 1/n of it across all members' copies,
//                   then copies the n reduced parts out;
//   reduce_scatter  each member copies its n destination blocks in and reduces its own block;
//   all_gather      each member copies its piece in and every member copies all pieces out.
// Every element is reduced by exactly one member, so all members receive bit-identical results.
// Chunks alternate between two sets of slots, so one member may run a chunk ahead of another
// without overwriting data still being read.
//
// Members meet at per-member counters in the segment (spin briefly, then sleep on a futex, so a
// waiting member leaves the cores to the ones still computing). The operations run in order on
// one worker thread; callers get a future (the collectives' usual waiting, timeouts and
// dead-peer diagnosis apply unchanged). The first chunk of every operation checks that all
// members passed the same operation, element count and type.
//
// Only used for CPU tensors of floating types on groups whose members share a host (hostname
// and boot id compared at group creation); COLOSSAL_SHM=0 turns it off.
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace colossal::dist::detail {

class ShmTransport {
 public:
  struct Options {
    int64_t slot_bytes = 8 << 20;  // one member's share of one chunk
    std::chrono::milliseconds timeout{60000};
    std::string group_name;  // for messages
  };

  /// Collective over the members through `store` (a store prefix unique to the group): member 0
  /// creates the segment, the others map it, then it is unlinked (nothing is left behind even
  /// after a crash).
  static std::unique_ptr<ShmTransport> connect(c10d::Store& store, int rank, int size, Options options);
  /// A string identifying this host (hostname and boot id): members with equal strings share
  /// memory.
  static std::string host_identity();
  /// Whether shared memory may be used at all (COLOSSAL_SHM is not 0).
  static bool enabled_by_environment();

  ~ShmTransport();
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  /// CPU, contiguous, and a floating type (float, double, bfloat16, half).
  static bool supports(const at::Tensor& t);

  /// Sums into `tensor` on every member; `average` then divides by the size (the same bits as
  /// dividing the sum afterwards, but done on each part while it is in cache).
  c10::intrusive_ptr<c10::ivalue::Future> all_reduce(at::Tensor tensor, bool average);
  /// `input` holds size x output.numel() elements; member r receives the sum of block r.
  c10::intrusive_ptr<c10::ivalue::Future> reduce_scatter(at::Tensor output, at::Tensor input, bool average);
  /// `output` holds size x input.numel() elements; block r comes from member r.
  c10::intrusive_ptr<c10::ivalue::Future> all_gather(at::Tensor output, at::Tensor input);

  /// Wakes and stops the worker (pending and running operations fail).
  void abort();

  struct Segment;

 private:
  ShmTransport(int rank, int size, Options options, void* base, size_t bytes);

  enum class Op : uint32_t { kAllReduce = 1, kReduceScatter = 2, kAllGather = 3 };
  using Task = std::function<void()>;
  c10::intrusive_ptr<c10::ivalue::Future> enqueue(std::vector<at::Tensor> result, Task task);
  void worker_loop();

  // One round: mark arrival for `generation` and wait for every member.
  void arrive_and_wait(uint32_t generation);
  // Publishes this member's description of the current operation and checks the others'.
  void check_agreement(int set, Op op, int64_t numel, int dtype);
  // The chunk's meeting point: describe the operation (first chunk), arrive, wait for all,
  // check that everyone called the same thing (first chunk).
  void meet(int set, Op op, int64_t numel, at::ScalarType dtype, bool& first);
  void* slot(int set, int member) const;

  void run_all_reduce(const at::Tensor& t, bool average);
  void run_reduce_scatter(const at::Tensor& out, const at::Tensor& in, bool average);
  void run_all_gather(const at::Tensor& out, const at::Tensor& in);

  int rank_, size_;
  Options options_;
  void* base_;
  size_t bytes_;
  Segment* header_;
  char* data_;
  uint32_t generation_ = 0;
  uint64_t round_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::atomic<bool> aborted_{false};
  std::thread worker_;
};

}  // namespace colossal::dist::detail
