#pragma once
// The life of a parameter inside a ZeRO-3 chunk, as explicit states with a table of legal
// transitions, so that a hook firing at the wrong time fails loudly with both state names
// instead of computing on released memory.
//
//   FREE              the chunk is not gathered: the parameter has no data
//   HOLD              gathered, not in use
//   COMPUTE           a forward or backward that uses it is running
//   READY_FOR_REDUCE  its gradient of this backward is in the chunk's gradient buffer
//   HOLD_AFTER_BWD    the chunk's gradients were reduced; gathered until released
//
//   FREE -> HOLD                        gather
//   HOLD -> COMPUTE                     pre-forward / pre-backward
//   HOLD -> FREE                        release
//   HOLD -> READY_FOR_REDUCE            end of backward: a parameter that got no gradient
//   COMPUTE -> HOLD                     post-forward
//   COMPUTE -> COMPUTE                  a module running again (shared, or re-entered)
//   COMPUTE -> READY_FOR_REDUCE         its gradient was accumulated
//   READY_FOR_REDUCE -> HOLD_AFTER_BWD  the chunk's gradients were reduce-scattered
//   HOLD_AFTER_BWD -> FREE              release after backward
//   HOLD_AFTER_BWD -> HOLD              kept gathered (refreshed after the optimizer step)
#include <cstdint>
#include <string>

namespace colossal::zero {

enum class TensorState : uint8_t { kFree, kHold, kCompute, kReadyForReduce, kHoldAfterBwd };

const char* state_name(TensorState s);
bool is_legal_transition(TensorState from, TensorState to);
/// Throws naming the tensor and both states when the transition is not in the table.
void check_transition(const std::string& tensor, TensorState from, TensorState to);

}  // namespace colossal::zero
