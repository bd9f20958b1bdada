#include "core/zero/chunk_state.h"

#include "core/common/check.h"

namespace colossal::zero {

const char* state_name(TensorState s) {
  switch (s) {
    case TensorState::kFree: return "FREE";
    case TensorState::kHold: return "HOLD";
    case TensorState::kCompute: return "COMPUTE";
    case TensorState::kReadyForReduce: return "READY_FOR_REDUCE";
    case TensorState::kHoldAfterBwd: return "HOLD_AFTER_BWD";
  }
  return "?";
}

bool is_legal_transition(TensorState from, TensorState to) {
  using S = TensorState;
  switch (from) {
    case S::kFree: return to == S::kHold;
    case S::kHold: return to == S::kCompute || to == S::kFree || to == S::kReadyForReduce;
    case S::kCompute: return to == S::kHold || to == S::kCompute || to == S::kReadyForReduce;
    case S::kReadyForReduce: return to == S::kHoldAfterBwd;
    case S::kHoldAfterBwd: return to == S::kFree || to == S::kHold;
  }
  return false;
}

void check_transition(const std::string& tensor, TensorState from, TensorState to) {
  COLOSSAL_CHECK(is_legal_transition(from, to), "[gemini] illegal state transition of '", tensor,
                 "': ", state_name(from), " -> ", state_name(to),
                 " (a parameter used outside colossal::nn::call, or hooks out of order)");
}

}  // namespace colossal::zero
