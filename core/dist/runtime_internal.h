#pragma once
// Internal to core/dist: access to the runtime's monitor for the collectives.
namespace colossal::dist {
class Monitor;
namespace detail {
/// The process's monitor, or nullptr before init().
Monitor* monitor();
}  // namespace detail
}  // namespace colossal::dist
