#pragma once
// Collective-mismatch detection (COLOSSAL_CHECK_COLLECTIVES=1). Before each collective, every
// member publishes what it is about to call — the operation, its arguments (reduce op, root,
// shapes, dtype) and the caller's label (CollectiveLabel) — under the group's key in the
// rendezvous store, and reads everyone else's. A member that called something else (a different
// shape, a different operation, or the next collective because it skipped one) makes every
// member raise at once, naming what each called: instead of a hang, or a silent wrong sum when
// the byte counts happen to match.
//
// It goes through the store, never through a collective, so it works the same for Gloo and NCCL
// groups and across hosts. Off by default and free when off; when on, each collective costs a
// store round trip or two (bench_allreduce run with and without it measures the difference).
//
// Keys are reused in two slots per member (collective n uses slot n % 2): no member can publish
// n + 2 before every member has published n + 1, which each does only after reading n.
#include <cstdint>
#include <string>

#include "core/dist/group.h"

namespace colossal::dist::detail {

/// COLOSSAL_CHECK_COLLECTIVES, read once.
bool collective_checks_enabled();

/// The caller's label for collectives issued on this thread (CollectiveLabel), or "".
const std::string& current_collective_label();

/// Publishes this member's call `seq` on `group` (`call`, e.g. "all_reduce(sum) [4, 8] Float")
/// and waits for every member's; throws on every member when they differ. Bounded by the group
/// timeout and by the monitor (a member gone ends the wait).
void agree_on_collective(const Group& group, uint64_t seq, const std::string& call);

}  // namespace colossal::dist::detail
