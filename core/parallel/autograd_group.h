#pragma once
// Carrying a process group into a custom autograd function's backward: the function saves a
// capsule holding a copy of the group (cheap: shared state) in its context.
#include <torch/autograd.h>

#include "core/dist/group.h"

namespace colossal::parallel {

struct GroupHolder : torch::CustomClassHolder {
  explicit GroupHolder(dist::Group g) : group(std::move(g)) {}
  dist::Group group;
};

inline c10::intrusive_ptr<GroupHolder> hold(const dist::Group& g) { return c10::make_intrusive<GroupHolder>(g); }

inline void save_group(torch::autograd::AutogradContext* ctx, const c10::intrusive_ptr<GroupHolder>& g) {
  ctx->saved_data["group"] = c10::IValue::make_capsule(g);
}

inline const dist::Group& saved_group(torch::autograd::AutogradContext* ctx) {
  return static_cast<GroupHolder*>(ctx->saved_data["group"].toCapsule().get())->group;
}

}  // namespace colossal::parallel
