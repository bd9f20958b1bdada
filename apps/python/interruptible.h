#pragma once
// Running a long C++ job from Python with Ctrl-C working: the GIL is released for the job, and
// the job's step boundaries ask the interpreter for pending signals (core/common/interrupt.h).
// Python's SIGINT handler raises KeyboardInterrupt there; the job unwinds with
// colossal::Interrupted, and the caller gets the KeyboardInterrupt back.
#include <torch/csrc/utils/pybind.h>

#include <optional>

#include "core/common/interrupt.h"

namespace colossal::python {

template <typename Fn>
auto run_interruptible(Fn&& job) {
  namespace py = pybind11;
  std::optional<py::error_already_set> raised;  // what the signal handler raised
  InterruptCheckScope scope([&raised] {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() == 0) return false;
    raised.emplace();  // takes (and clears) the pending Python error
    return true;
  });
  try {
    py::gil_scoped_release nogil;
    return job();
  } catch (const Interrupted&) {
    if (raised) throw std::move(*raised);
    throw;
  }
}

}  // namespace colossal::python
