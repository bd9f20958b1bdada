// colossal._C.bert: BERT models from Python — a Hugging Face directory loaded (or a config.json
// built) as BertForMaskedLM or BertForSequenceClassification, its parameters the C++ module's own
// tensors; colossal/bert.py gives them their Python shape.
#include <torch/csrc/utils/pybind.h>

#include "apps/python/bindings.h"
#include "apps/python/boosted_model.h"
#include "bert/pretrained.h"
#include "core/checkpoint/model_io.h"

namespace colossal::python {
namespace py = pybind11;
namespace {

struct Bert {
  bert::BertConfig config;
  bert::BertForTask model{nullptr};
};

}  // namespace

void bind_bert(py::module_& m) {
  auto b = m.def_submodule("bert", "BERT encoders: masked LM and sequence classification");
  py::class_<Bert, std::shared_ptr<Bert>>(b, "Model", "BertForMaskedLM / BertForSequenceClassification (C++)")
      .def_static("load_pretrained", [](const std::string& dir, const std::string& task, int64_t num_labels) {
            py::gil_scoped_release nogil;
            bert::LoadBertOptions o;
            if (!task.empty()) o.head = bert::head_from_string(task);
            o.num_labels = num_labels;
            auto loaded = bert::load_pretrained(dir, o);
            auto out = std::make_shared<Bert>();
            out->config = loaded.config;
            out->model = loaded.model;
            return std::make_pair(out, loaded.new_layers);
          },
          py::arg("dir"), py::arg("task") = "", py::arg("num_labels") = 0,
          "a Hugging Face BERT directory; task mlm | classify (default: its architectures); returns the model and "
          "the layers the checkpoint lacked for the task")
      .def_static("from_config_json", [](const std::string& text, const std::string& task) {
            auto out = std::make_shared<Bert>();
            out->config = bert::BertConfig::from_json_text(text, "config");
            out->model = bert::BertForTask(out->config, bert::head_from_string(task));
            return out;
          },
          py::arg("text"), py::arg("task"))
      .def("forward", [](Bert& self, const at::Tensor& ids, const std::optional<at::Tensor>& mask,
                         const std::optional<at::Tensor>& types) {
            py::gil_scoped_release nogil;
            return self.model->forward(ids, mask.value_or(at::Tensor()), types.value_or(at::Tensor()));
          },
          py::arg("input_ids"), py::arg("attention_mask").none(true), py::arg("token_type_ids").none(true))
      .def("loss", [](Bert& self, const at::Tensor& ids, const std::optional<at::Tensor>& mask,
                      const std::optional<at::Tensor>& types, const at::Tensor& labels) {
            py::gil_scoped_release nogil;
            return self.model->loss(ids, mask.value_or(at::Tensor()), types.value_or(at::Tensor()), labels);
          },
          py::arg("input_ids"), py::arg("attention_mask").none(true), py::arg("token_type_ids").none(true),
          py::arg("labels"))
      .def("named_parameters", [](Bert& self) {
            std::vector<std::pair<std::string, at::Tensor>> out;
            for (const auto& p : self.model->named_parameters()) out.emplace_back(p.key(), p.value());
            return out;
          })
      .def("train", [](Bert& self, bool mode) { self.model->train(mode); }, py::arg("mode") = true)
      .def_property_readonly("training", [](const Bert& self) { return self.model->is_training(); })
      .def_property_readonly("task", [](const Bert& self) {
            return self.model->head() == bert::BertHead::kMaskedLM ? "mlm" : "classify";
          })
      .def_property_readonly("config_json", [](const Bert& self) {
            return self.config.to_json(bert::architecture_of(self.model->head()));
          })
      .def("cpp_module", [](Bert& self) { return CppModule{self.model.ptr()}; })
      .def("save_pretrained", [](Bert& self, const std::string& dir, BoostedModel* boosted, bool write) {
             py::gil_scoped_release nogil;
             auto state = boosted ? boosted->optimizer().model_wrapper().checkpoint().model_state_to_save(*self.model)
                                  : checkpoint::model_state(*self.model);
             if (write) bert::save_pretrained(self.config, self.model->head(), state, dir);
           },
           py::arg("dir"), py::arg("boosted").none(true), py::arg("write"));
}

}  // namespace colossal::python
