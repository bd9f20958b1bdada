#pragma once
// StageLink: activations and gradients between pipeline ranks over the pipeline group. Sends are
// asynchronous (the sender goes on computing; wait_sends() before the step ends); receives
// block, bounded by the group's timeout, and a failure names the stage, the microbatch and what
// was awaited.
//
// Each channel (one virtual stage's input, forward or backward) sends its tensor's shape and
// dtype once per step, with the first message; later messages carry data only and must have that
// shape (a step's microbatches are equal: a different one is an error naming both shapes).
// new_step() forgets the shapes, so the next step (or an evaluation) may use others. On a group
// handle tagged for FP8 payloads (--fp8_communication) floating-point data travels as FP8 with its
// scale (e4m3 forward, e5m2 backward; fp8_payload.h).
#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/dist/collectives.h"
#include "core/dist/group.h"

namespace colossal::parallel::pipeline {

enum class Direction { kForward, kBackward };

/// Where a message goes: the virtual stage whose input it is (forward), or whose output's
/// gradient it is (backward), and the microbatch.
struct Channel {
  int virtual_stage = 0;
  Direction direction = Direction::kForward;
  int microbatch = 0;
};

class StageLink {
 public:
  explicit StageLink(dist::Group group) : group_(std::move(group)) {}

  void send(const at::Tensor& tensor, int peer, const Channel& channel);
  at::Tensor recv(int peer, const Channel& channel);
  void wait_sends();
  /// Both ends call it at the same point (the start of a step).
  void new_step() {
    sent_.clear();
    received_.clear();
  }
  const dist::Group& group() const { return group_; }

 private:
  struct Meta {
    std::vector<int64_t> shape;
    c10::ScalarType dtype = c10::kFloat;
  };
  static int key(const Channel& c) { return c.virtual_stage * 2 + static_cast<int>(c.direction); }

  dist::Group group_;
  std::map<int, Meta> sent_, received_;  // by key(): metadata already exchanged
  std::vector<std::pair<dist::Handle, at::Tensor>> in_flight_;
};

}  // namespace colossal::parallel::pipeline
