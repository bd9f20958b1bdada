// colossal._C: the extension behind the `colossal` Python package (apps/python/colossal/).
// Import torch first (the package does): the extension links against the LibTorch torch loaded.
#include "apps/python/bindings.h"

#include "core/common/check.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "colossal-cpp's runtime: the distributed runtime, the Booster and its plugins";
  // Every C++ error reaches Python as RuntimeError carrying the C++ message (without c10's
  // backtrace, which names C++ frames a Python user cannot act on).
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const py::error_already_set&) {
      throw;
    } catch (const py::builtin_exception&) {
      throw;
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, colossal::error_text(e).c_str());
    }
  });
  colossal::python::bind_dist(m);
  colossal::python::bind_booster(m);
  colossal::python::bind_apps(m);
  colossal::python::bind_llama(m);
  colossal::python::bind_bert(m);
  colossal::python::bind_peft(m);
  colossal::python::bind_posttrain(m);
}
