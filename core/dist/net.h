#pragma once
// Small socket helpers for rendezvous.
#include <string>

namespace colossal::dist {

/// True for "localhost", 127.0.0.0/8 and ::1.
bool is_loopback_host(const std::string& host);
/// Whether `host` names an address of this machine (one of its addresses binds). False when it
/// does not resolve.
bool is_local_host(const std::string& host);
/// A TCP port that was free a moment ago on `host` (the kernel's choice for port 0).
int find_free_port(const std::string& host = "127.0.0.1");
/// This machine's address on the route towards `host` (no packet is sent): the address peers on
/// other machines can reach us at. Throws naming the host when it does not resolve.
std::string local_address_towards(const std::string& host);

}  // namespace colossal::dist
