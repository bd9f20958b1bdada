#pragma once
// Collectives on any Group, each bounded by the group's timeout. A failure (a peer died, the
// operation timed out, the transport broke) throws a c10::Error naming the group, the operation,
// its sequence number on the group and the missing rank(s), and tells the other ranks this one
// failed so they stop waiting too. With COLOSSAL_CHECK_COLLECTIVES=1 the members first agree on
// what they are calling (collective_check.h): a mismatch raises on all of them at once.
//
// Tensor layout conventions (dim 0 is the split dimension, tensors contiguous):
//   reduce_scatter: input  = size * output.numel() elements, rank r receives chunk r.
//   all_gather:     output = size * input.numel() elements, chunk r comes from rank r.
//   all_to_all:     rank r sends input rows [off_in[k], off_in[k]+input_splits[k]) to rank k;
//                   empty splits mean equal splits of dim 0.
#include <ATen/core/Tensor.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "core/dist/group.h"

namespace colossal::dist {

enum class ReduceOp { kSum, kAvg, kMax, kMin, kProduct };

/// Names the collectives this thread issues while it lives (an inner label replaces an outer one
/// until it ends). With COLOSSAL_CHECK_COLLECTIVES=1 every member's label is part of what the
/// members must agree on, so a mismatch report says which call site each rank was at:
///
///   dist::CollectiveLabel label("gradient sync");
///   dist::all_reduce(grads, dp_group);
class CollectiveLabel {
 public:
  explicit CollectiveLabel(std::string label);
  ~CollectiveLabel();
  CollectiveLabel(const CollectiveLabel&) = delete;
  CollectiveLabel& operator=(const CollectiveLabel&) = delete;

 private:
  std::string previous_;
};

/// A collective in flight. wait() blocks until it completes or fails (with the diagnosis).
/// Destroying an un-waited handle waits (errors are then logged, not thrown).
class Handle {
 public:
  Handle();
  Handle(Handle&&) noexcept;
  Handle& operator=(Handle&&) noexcept;
  ~Handle();
  void wait();
  bool done() const { return state_ == nullptr; }

  struct State;

 private:
  friend struct HandleAccess;
  explicit Handle(std::unique_ptr<State> s);
  std::unique_ptr<State> state_;
};

/// (Synchronous all_reduce and broadcast take host tensors on an NCCL group too: they are staged
/// through the current GPU, so scalars such as losses and flags need no device of their own.)
void all_reduce(at::Tensor& tensor, const Group& group, ReduceOp op = ReduceOp::kSum);
Handle all_reduce_async(at::Tensor& tensor, const Group& group, ReduceOp op = ReduceOp::kSum);

void reduce_scatter(at::Tensor& output, const at::Tensor& input, const Group& group,
                    ReduceOp op = ReduceOp::kSum);
Handle reduce_scatter_async(at::Tensor& output, const at::Tensor& input, const Group& group,
                            ReduceOp op = ReduceOp::kSum);

void all_gather(at::Tensor& output, const at::Tensor& input, const Group& group);
Handle all_gather_async(at::Tensor& output, const at::Tensor& input, const Group& group);

/// `src` is a group rank.
void broadcast(at::Tensor& tensor, int src, const Group& group);
/// Rank `src`'s bytes on every rank of `group` (the length first; the others' `text` is ignored).
std::string broadcast_text(const std::string& text, int src, const Group& group);

/// Uneven splits allowed; sizes are rows of dim 0 and must agree pairwise across ranks.
void all_to_all(at::Tensor& output, const at::Tensor& input, const Group& group,
                const std::vector<int64_t>& output_splits = {},
                const std::vector<int64_t>& input_splits = {});

/// Point to point; `peer` is a group rank. send_async's tensor must stay unchanged until the
/// handle is waited.
void send(const at::Tensor& tensor, int peer, const Group& group, int tag = 0);
Handle send_async(const at::Tensor& tensor, int peer, const Group& group, int tag = 0);
void recv(at::Tensor& tensor, int peer, const Group& group, int tag = 0);

void barrier(const Group& group);

}  // namespace colossal::dist
