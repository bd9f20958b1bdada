// colossal._C.peft: LoRA's pieces from Python — the QLoRA base formats (NF4 in bitsandbytes'
// layout, int8, int4) to quantize and read back a weight, and the merge of an adapter into its
// base model's directory (colossal merge).
#include <torch/csrc/utils/pybind.h>

#include "apps/python/bindings.h"
#include "core/nn/quantized_weight.h"
#include "core/peft/lora.h"
#include "kernels/cpu/nf4.h"

namespace colossal::python {
namespace py = pybind11;

void bind_peft(py::module_& m) {
  auto p = m.def_submodule("peft", "LoRA and QLoRA: base quantization, adapter merging");
  using nn::QuantizedWeight;
  p.def("quantize", [](const torch::Tensor& w, const std::string& format) {
        py::gil_scoped_release nogil;
        return QuantizedWeight(w, QuantizedWeight::parse(format));
      }, py::arg("weight"), py::arg("format"), "a [out, in] weight quantized as nf4 | int8 | int4");
  p.def("nf4_from_parts", [](int64_t rows, int64_t cols, const torch::Tensor& codes, const torch::Tensor& absmax_codes,
                             const torch::Tensor& absmax_scales, double offset) {
        return QuantizedWeight::from_nf4(rows, cols, codes, absmax_codes, absmax_scales, static_cast<float>(offset));
      }, py::arg("rows"), py::arg("cols"), py::arg("codes"), py::arg("absmax_codes"), py::arg("absmax_scales"),
      py::arg("offset"), "an NF4 weight from bitsandbytes' pieces (quantize_4bit with compress_statistics)");
  p.def("nf4_levels", [] { return torch::from_blob(const_cast<float*>(kernels::cpu::kNf4Values), {16}).clone(); });
  p.def("dynamic_map", [] { return QuantizedWeight::dynamic_map().clone(); },
        "the signed 8-bit map of the double-quantized absmax (bitsandbytes' create_dynamic_map)");
  py::class_<QuantizedWeight>(p, "QuantizedWeight")
      .def_property_readonly("format", [](const QuantizedWeight& w) { return QuantizedWeight::name(w.format()); })
      .def_property_readonly("shape", [](const QuantizedWeight& w) { return std::vector<int64_t>{w.rows(), w.cols()}; })
      .def_property_readonly("bytes", &QuantizedWeight::bytes)
      .def_property_readonly("codes", &QuantizedWeight::data)
      .def_property_readonly("absmax_codes", &QuantizedWeight::scales)
      .def_property_readonly("absmax_scales", &QuantizedWeight::absmax_scales)
      .def_property_readonly("absmax_offset", &QuantizedWeight::absmax_offset)
      .def("dequantize", [](const QuantizedWeight& w) {
            py::gil_scoped_release nogil;
            return w.dequantize();
          }, "the weight back as fp32 [out, in]")
      .def("linear", [](const QuantizedWeight& w, const torch::Tensor& x) { return nn::quantized_linear(x, w); },
           py::arg("x"), "x W^T with W dequantized piece by piece (x's gradient flows, W gets none)");
  p.def("merge", [](const std::string& model, const std::string& adapter, const std::string& output) {
        py::gil_scoped_release nogil;
        const auto merged = peft::write_merged_model(model, adapter, output);
        return merged.tensors;
      }, py::arg("model"), py::arg("adapter"), py::arg("output"),
      "folds a PEFT adapter into its base Hugging Face directory, written to output (colossal merge)");
}

}  // namespace colossal::python
