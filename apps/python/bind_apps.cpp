// colossal._C.apps: the applications as functions, with the binaries' command-line arguments
// (colossal/llama.py, vit.py, bert.py, recsys.py and sora.py turn keyword arguments into them).
#include <torch/csrc/utils/pybind.h>

#include "apps/bert/train_bert.h"
#include "apps/llama/train_llama.h"
#include "apps/python/bindings.h"
#include "apps/python/interruptible.h"
#include "apps/recsys/train_recsys.h"
#include "apps/sora/generate_video.h"
#include "apps/sora/train_sora.h"
#include "apps/vit/train_vit.h"

namespace colossal::python {
namespace py = pybind11;
namespace {

py::dict summary_dict(const apps::RunSummary& s) {
  py::dict d;
  d["exit_code"] = s.exit_code;
  py::dict metrics, outputs;
  for (const auto& [k, v] : s.metrics) metrics[py::str(k)] = v;
  for (const auto& [k, v] : s.outputs) outputs[py::str(k)] = v;
  d["metrics"] = metrics;
  d["outputs"] = outputs;
  return d;
}

}  // namespace

void bind_apps(py::module_& m) {
  auto apps = m.def_submodule("apps", "the applications as functions of their command-line arguments");
  apps.def(
      "train_llama",
      [](const std::vector<std::string>& args, const std::optional<py::function>& reward) {
        llama_app::RewardFunction fn;
        if (reward) {
          // Called on the job's thread with the GIL released: take it for the call. A Python
          // exception becomes a C++ error carrying its message (the step fails with it).
          auto callable = std::make_shared<py::function>(*reward);
          fn = [callable](const std::string& prompt, const std::string& completion, const std::string& answer) {
            py::gil_scoped_acquire gil;
            try {
              return (*callable)(prompt, completion, answer).cast<double>();
            } catch (py::error_already_set& e) {
              throw std::runtime_error(e.what());
            } catch (const py::cast_error& e) {
              throw std::runtime_error(std::string("it must return a number (") + e.what() + ")");
            }
          };
        }
        auto out = summary_dict(run_interruptible([&] { return llama_app::train_llama(args, fn); }));
        if (reward) {  // the callable's last reference goes with the GIL held
          py::gil_scoped_acquire gil;
          fn = nullptr;
        }
        return out;
      },
      py::arg("args"), py::arg("reward") = py::none(),
      "train_llama with these arguments; returns {exit_code, metrics, outputs}. reward: --mode grpo's reward "
      "function, reward(prompt, completion, answer) -> float");
  apps.def("train_vit", [](const std::vector<std::string>& args) {
        return summary_dict(run_interruptible([&] { return vit_app::train_vit(args); }));
      },
      py::arg("args"), "train_vit with these arguments; returns {exit_code, metrics, outputs}");
  apps.def("train_bert", [](const std::vector<std::string>& args) {
        return summary_dict(run_interruptible([&] { return bert_app::train_bert(args); }));
      },
      py::arg("args"), "train_bert with these arguments; returns {exit_code, metrics, outputs}");
  apps.def("train_recsys", [](const std::vector<std::string>& args) {
        return summary_dict(run_interruptible([&] { return recsys_app::train_recsys(args); }));
      },
      py::arg("args"), "train_recsys with these arguments; returns {exit_code, metrics, outputs}");
  apps.def("train_sora", [](const std::vector<std::string>& args) {
        return summary_dict(run_interruptible([&] { return sora_app::train_sora(args); }));
      },
      py::arg("args"), "train_sora with these arguments; returns {exit_code, metrics, outputs}");
  apps.def("generate_video", [](const std::vector<std::string>& args) {
        return summary_dict(run_interruptible([&] { return sora_app::generate_video(args); }));
      },
      py::arg("args"), "generate_video with these arguments; returns {exit_code, metrics, outputs}");
}

}  // namespace colossal::python
