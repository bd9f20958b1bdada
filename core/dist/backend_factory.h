#pragma once
// Construction of c10d backends. This header hands out only c10d types; the translation units
// behind it are the only ones that include backend-specific headers (Gloo, NCCL).
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

namespace colossal::dist {

struct BackendOptions {
  std::chrono::milliseconds timeout{60000};
  // Gloo: the local address its TCP pairs bind to, or an interface name (GLOO_SOCKET_IFNAME).
  std::string gloo_address = "127.0.0.1";
  std::string gloo_interface;
  int gloo_threads = 2;
};

/// A ProcessGroupGloo over `store` (already prefixed for this group).
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    const BackendOptions& options);

/// A ProcessGroupNCCL; throws on builds without CUDA (no_nccl_backend.cpp).
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    const BackendOptions& options);
/// Whether this build has NCCL and a CUDA device is visible.
bool nccl_available();

}  // namespace colossal::dist
