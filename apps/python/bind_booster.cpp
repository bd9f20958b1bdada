// colossal._C.Booster: the Booster over a model defined in Python. boost() takes the module's
// named parameters and buffers (the same tensors, held in a module shell: module_shell.h) and the
// optimizer's kind and param groups (optimizer_bridge.h), and returns a BoostedModel: the
// optimizer the plugin drives plus what saving and loading need. The Python package
// (colossal/booster.py) gives this the ColossalAI shape.
#include <torch/csrc/utils/pybind.h>

#include "apps/python/bindings.h"
#include "apps/python/boosted_model.h"
#include "apps/python/module_shell.h"
#include "apps/python/optimizer_bridge.h"
#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/common/check.h"
#include "core/nn/module_hooks.h"

namespace colossal::python {
namespace py = pybind11;
namespace {

// A pipeline stage written in Python: the runner (core/parallel/pipeline/runner.h) calls these
// on the calling thread with the GIL released, so each takes it back for the Python call.
// Python objects are released with the GIL held (the functions outlive no call: the runner
// holds them only during execute_pipeline).
parallel::pipeline::StageFunctions python_stage_functions(py::function forward, py::function loss,
                                                          std::vector<std::vector<at::Tensor>> chunk_parameters) {
  auto fwd = std::make_shared<py::function>(std::move(forward));
  auto lss = std::make_shared<py::function>(std::move(loss));
  parallel::pipeline::StageFunctions f;
  f.forward = [fwd](int chunk, const torch::Tensor& x) {
    py::gil_scoped_acquire gil;
    return (*fwd)(chunk, x).cast<at::Tensor>();
  };
  f.loss = [lss](const torch::Tensor& output, const torch::Tensor& target) {
    py::gil_scoped_acquire gil;
    return (*lss)(output, target).cast<at::Tensor>();
  };
  f.parameters = [chunk_parameters = std::move(chunk_parameters)](int chunk) {
    COLOSSAL_CHECK(chunk >= 0 && chunk < static_cast<int>(chunk_parameters.size()), "[python] pipeline chunk ", chunk,
                   " of ", chunk_parameters.size());
    return chunk_parameters[chunk];
  };
  return f;
}

class PyBooster {
 public:
  PyBooster(const std::string& plugin, const std::map<std::string, std::string>& settings) {
    booster::PluginConfig c;
    c.name = plugin;
    for (const auto& [key, text] : settings) c.set(key, text, "keyword argument " + key);
    config_ = c.describe();
    plugin_ = booster::make_plugin(c);
    booster_ = std::make_unique<booster::Booster>(plugin_);
  }

  // Where this rank sits in the pipeline (and the data-parallel replicas), for
  // colossal.PipelineModule to build this rank's stage.
  py::dict pipeline_layout() {
    const auto context = plugin_->parallel_context();
    const auto& l = context.pipeline;
    const auto& dims = plugin_->dims();
    py::dict d;
    d["stages"] = l.schedule.stages;
    d["chunks"] = l.schedule.chunks;
    d["schedule"] = l.schedule.kind;
    d["microbatches"] = l.schedule.microbatches;
    d["microbatch_size"] = l.microbatch_size;
    d["rank"] = l.rank();
    std::vector<int> virtual_stages;
    for (int c = 0; c < l.chunks(); ++c) virtual_stages.push_back(l.enabled() ? l.virtual_stage(c) : 0);
    d["virtual_stages"] = virtual_stages;
    d["dp"] = dims.dp();
    d["dp_rank"] = dims.coord(dist::Axis::kDp);
    return d;
  }
  int64_t pipeline_microbatches(int64_t batch_size) {
    return plugin_->parallel_context().pipeline.microbatches_for(batch_size);
  }

  // param_groups: (tensors, {hyperparameter: value}) per group, as colossal/booster.py builds them.
  using GroupTuple = std::pair<std::vector<at::Tensor>, std::map<std::string, double>>;
  std::shared_ptr<BoostedModel> boost(const NamedTensorList& parameters, const NamedTensorList& buffers,
                                      const std::string& optimizer_kind, const std::vector<GroupTuple>& param_groups) {
    return boost_module(make_module_shell(parameters, buffers), optimizer_kind, param_groups);
  }

  std::shared_ptr<BoostedModel> boost_module(std::shared_ptr<torch::nn::Module> module, const std::string& optimizer_kind,
                                             const std::vector<GroupTuple>& param_groups) {
    auto out = std::make_shared<BoostedModel>();
    out->module = std::move(module);
    std::vector<ParamGroupSpec> groups;
    for (const auto& [params, options] : param_groups) groups.push_back({params, options});
    auto optimizer = make_bridged_optimizer(optimizer_kind, groups);
    py::gil_scoped_release nogil;  // boost() communicates (broadcasts the initial weights)
    out->boosted = booster_->boost(out->module, optimizer);
    return out;
  }

  booster::Booster& get() { return *booster_; }
  const std::string& describe() const { return config_; }

 private:
  std::shared_ptr<booster::Plugin> plugin_;
  std::unique_ptr<booster::Booster> booster_;
  std::string config_;
};

}  // namespace

void bind_booster(py::module_& m) {
  py::class_<BoostedModel, std::shared_ptr<BoostedModel>>(m, "BoostedModel",
                                                          "a model and optimizer as a plugin runs them")
      .def("step", [](BoostedModel& b) {
            py::gil_scoped_release nogil;
            return b.optimizer().step();
          },
          "The optimizer step through the plugin; False when it was skipped (fp16 overflow).")
      .def("zero_grad", [](BoostedModel& b) { b.optimizer().zero_grad(); })
      .def_property_readonly("compute_dtype", [](const BoostedModel& b) { return std::string(c10::toString(b.boosted.compute_dtype)); },
                             "the dtype inputs should be cast to (mixed precision): c10's name, e.g. Float, BFloat16")
      .def("param_group_count", [](BoostedModel& b) { return b.optimizer().inner().param_groups().size(); })
      .def("get_lr", [](BoostedModel& b, size_t group) {
            auto& groups = b.optimizer().inner().param_groups();
            COLOSSAL_CHECK(group < groups.size(), "[python] param group ", group, " of ", groups.size());
            return groups[group].options().get_lr();
          })
      .def("set_lr", [](BoostedModel& b, size_t group, double lr) {
            auto& groups = b.optimizer().inner().param_groups();
            COLOSSAL_CHECK(group < groups.size(), "[python] param group ", group, " of ", groups.size());
            groups[group].options().set_lr(lr);
          })
      // ZeRO-3 (Gemini) over a Python module: the plugin hooks the shell's modules that own
      // parameters; colossal/booster.py registers torch forward hooks on the same-named Python
      // modules that run these, so each module's chunks are gathered just before it runs.
      .def("hooked_module_names", [](BoostedModel& b) {
            std::vector<std::string> names;
            for (const auto& item : b.module->named_modules(""))
              if (nn::detail::hooks_of(item.value().get())) names.push_back(item.key());
            return names;
          })
      .def("run_pre_hook", [](BoostedModel& b, const std::string& name, const std::vector<at::Tensor>& inputs) {
            auto hooks = nn::detail::hooks_of(b.submodule(name));
            if (!hooks || !hooks->pre) return;
            py::gil_scoped_release nogil;  // gathers are collectives
            hooks->pre(inputs);
          }, py::arg("name"), py::arg("inputs") = std::vector<at::Tensor>{})
      .def("run_post_hook", [](BoostedModel& b, const std::string& name, const std::vector<at::Tensor>& outputs) {
            auto hooks = nn::detail::hooks_of(b.submodule(name));
            if (!hooks || !hooks->post) return;
            py::gil_scoped_release nogil;
            hooks->post(outputs);
          })
      .def("full_state", [](BoostedModel& b) {
            checkpoint::NamedTensors state;
            {
              py::gil_scoped_release nogil;  // a collective under ZeRO-3: every rank calls it
              state = b.optimizer().model_wrapper().checkpoint().model_state_to_save(*b.module);
            }
            std::map<std::string, at::Tensor> out;
            for (const auto& [name, t] : state) out[name] = t.detach().clone();
            return out;
          },
          "the whole weights by name, gathered whatever the plugin (every rank calls it)")
      .def("memory_report", [](BoostedModel& b) {
            return b.optimizer().model_wrapper().hooks().memory_report(*b.module, b.optimizer().inner()).format();
          });

  py::class_<PyBooster>(m, "Booster", "the Booster with one plugin (make_plugin's names and options)")
      .def(py::init<const std::string&, const std::map<std::string, std::string>&>(), py::arg("plugin"),
           py::arg("settings"))
      .def("describe", &PyBooster::describe)
      .def("pipeline_layout", &PyBooster::pipeline_layout)
      .def("pipeline_microbatches", &PyBooster::pipeline_microbatches, py::arg("batch_size"))
      .def("execute_pipeline", [](PyBooster& self, BoostedModel& b, py::function forward, py::function loss,
                                  const std::vector<std::vector<at::Tensor>>& chunk_parameters,
                                  const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& targets,
                                  bool train) {
            auto fns = python_stage_functions(std::move(forward), std::move(loss), chunk_parameters);
            py::gil_scoped_release nogil;
            return train ? self.get().execute_pipeline(b.optimizer(), fns, inputs, targets)
                         : self.get().evaluate_pipeline(b.optimizer(), fns, inputs, targets);
          },
          py::arg("model"), py::arg("forward"), py::arg("loss"), py::arg("chunk_parameters"), py::arg("inputs"),
          py::arg("targets"), py::arg("train"))
      .def("boost", &PyBooster::boost, py::arg("parameters"), py::arg("buffers"), py::arg("optimizer_kind"),
           py::arg("param_groups"))
      .def("boost_module", [](PyBooster& self, const CppModule& m, const std::string& kind,
                              const std::vector<PyBooster::GroupTuple>& groups) {
            return self.boost_module(m.module, kind, groups);
          },
          py::arg("module"), py::arg("optimizer_kind"), py::arg("param_groups"))
      .def("enable_lora", [](PyBooster& self, const CppModule& m, int64_t rank, double alpha, double dropout,
                             const std::vector<std::string>& targets, const std::string& init,
                             const std::vector<std::string>& modules_to_save, const std::vector<std::string>& exclude,
                             uint64_t seed) {
            peft::LoraConfig c{.rank = rank, .alpha = alpha, .dropout = dropout, .targets = targets, .init = init,
                               .modules_to_save = modules_to_save, .seed = seed};
            const auto layers = self.get().enable_lora(*m.module, c, exclude);
            return py::make_tuple(layers.adapted, layers.trainable, layers.frozen);
          },
          py::arg("module"), py::arg("rank"), py::arg("alpha"), py::arg("dropout"), py::arg("targets"),
          py::arg("init"), py::arg("modules_to_save"), py::arg("exclude"), py::arg("seed"))
      .def("backward", [](PyBooster& self, const at::Tensor& loss, BoostedModel& b) {
            py::gil_scoped_release nogil;  // a Python autograd.Function in the graph takes it back
            self.get().backward(loss, b.optimizer());
          })
      .def("clip_grad_norm", [](PyBooster& self, BoostedModel& b, double max_norm, double norm_type) {
            py::gil_scoped_release nogil;
            return self.get().clip_grad_norm(b.optimizer(), max_norm, norm_type);
          },
          py::arg("model"), py::arg("max_norm"), py::arg("norm_type") = 2.0)
      .def("enter_no_sync", [](PyBooster& self, BoostedModel& b) {
            COLOSSAL_CHECK(!b.no_sync, "[python] no_sync is already open for this model");
            b.no_sync = std::make_unique<booster::NoSyncGuard>(b.optimizer().model_wrapper().hooks());
          })
      .def("exit_no_sync", [](PyBooster&, BoostedModel& b) { b.no_sync.reset(); })
      .def("save_model", [](PyBooster& self, BoostedModel& b, const std::string& dir, int64_t shard_bytes) {
            checkpoint::SaveModelOptions o;
            if (shard_bytes > 0) {
              o.shard = true;
              o.size_per_shard = shard_bytes;
            }
            py::gil_scoped_release nogil;
            self.get().save_model(b.optimizer(), *b.module, dir, o);
          },
          py::arg("model"), py::arg("dir"), py::arg("max_shard_bytes") = 0)
      .def("load_model", [](PyBooster& self, BoostedModel& b, const std::string& dir, bool strict) {
            checkpoint::LoadReport report;
            {
              py::gil_scoped_release nogil;
              report = self.get().load_model(b.optimizer(), *b.module, dir);
            }
            COLOSSAL_CHECK(!strict || report.clean(), "[python] loading ", dir, ": ", report.describe());
            return report.describe();
          },
          py::arg("model"), py::arg("dir"), py::arg("strict") = true)
      .def("save_checkpoint", [](PyBooster& self, BoostedModel& b, const std::string& root, int64_t step,
                                 int64_t epoch, int keep_last) {
            booster::CheckpointOptions o;
            o.keep_last = keep_last;
            py::gil_scoped_release nogil;
            self.get().save_checkpoint(b.boosted, root, {.step = step, .epoch = epoch}, o);
          },
          py::arg("model"), py::arg("root"), py::arg("step"), py::arg("epoch") = 0, py::arg("keep_last") = 0)
      .def("load_checkpoint", [](PyBooster& self, BoostedModel& b, const std::string& root) {
            booster::TrainingState s;
            {
              py::gil_scoped_release nogil;
              s = self.get().load_checkpoint(b.boosted, root);
            }
            return py::make_tuple(s.step, s.epoch);
          },
          py::arg("model"), py::arg("root"));

  py::class_<CppModule>(m, "CppModule", "a C++ module (e.g. colossal.llama's) as the Booster takes it");

  m.def("plugin_names", &booster::plugin_names);
  m.def("plugins_help", &booster::plugins_help);
}

}  // namespace colossal::python
