// The only translation unit that includes Gloo headers. See core/dist/README.md ("Gloo headers")
// for why Debian's libgloo-dev headers are safe with the torch wheel's newer built-in Gloo:
// everything used here is either out-of-line in libtorch (the constructor, the device factories)
// or has a layout that does not depend on Gloo's types (smart pointers, std containers).
// Nothing here instantiates GlooStore or calls an inline method of a Gloo class.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "core/dist/backend_factory.h"

namespace colossal::dist {

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    const BackendOptions& options) {
  auto opts = c10d::ProcessGroupGloo::Options::create(options.timeout);
  if (!options.gloo_interface.empty()) {
    opts->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForInterface(options.gloo_interface));
  } else {
    opts->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForHostname(options.gloo_address));
  }
  opts->threads = options.gloo_threads;
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
  return c10::static_intrusive_pointer_cast<c10d::Backend>(pg);
}

}  // namespace colossal::dist
