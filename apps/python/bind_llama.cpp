// colossal._C.llama: LLaMA models from Python — the tokenizer, a model directory loaded for
// fine-tuning (its parameters are the C++ module's own tensors, so torch.optim and the Booster
// see them without copies), the generation engine, and the OpenAI-compatible server.
// colossal/llama.py gives these their Python shape.
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <thread>

#include "apps/llama/engine_setup.h"
#include "apps/llama/openai_server.h"
#include "core/common/config.h"
#include "core/common/options.h"
#include "apps/python/bindings.h"
#include "apps/python/boosted_model.h"
#include "core/checkpoint/model_io.h"
#include "core/common/check.h"
#include "core/inference/engine.h"
#include "core/peft/lora.h"
#include "llama/inference.h"
#include "llama/pretrained.h"
#include "llama/tokenizer.h"

namespace colossal::python {
namespace py = pybind11;
using llama::Tokenizer;
namespace {

// A LLaMA model for training from Python: the module, its config and where it came from.
struct CausalLM {
  llama::LlamaConfig config;
  llama::LlamaForCausalLM model{nullptr};
};

// The engine and what it needs alive (apps/llama/engine_setup.h: the setup infer_llama uses).
struct Generator {
  llama_app::LoadedEngine loaded;
};

// A Python value as JSON (the engine's settings are text, numbers and booleans).
nlohmann::json json_of(const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
  if (py::isinstance<py::int_>(v)) return v.cast<long long>();
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {  // lora=["a=DIR", "b=DIR"]
    nlohmann::json list = nlohmann::json::array();
    for (const auto& item : v) list.push_back(json_of(item));
    return list;
  }
  return py::str(v).cast<std::string>();
}

// The engine from keyword arguments: the same settings, names and checks as infer_llama's flags.
std::shared_ptr<Generator> make_generator(const py::dict& options) {
  nlohmann::json doc = nlohmann::json::object();
  for (const auto& [key, value] : options) doc[key.cast<std::string>()] = json_of(value);
  const auto node = ConfigNode::from_json(doc, "colossal.llama engine options");
  llama_app::EngineSetup setup;
  read_options(setup, node);
  node.check_all_keys_used();
  setup.dtype_given = node.has("dtype");
  auto g = std::make_shared<Generator>();
  py::gil_scoped_release nogil;
  g->loaded = llama_app::load_engine(setup);
  return g;
}

inference::SamplingParams sampling_from(const py::dict& kw) {
  inference::SamplingParams p;
  for (const auto& [key, value] : kw) {
    const auto k = key.cast<std::string>();
    if (k == "max_new_tokens" || k == "max_tokens") p.max_tokens = value.cast<int64_t>();
    else if (k == "temperature") p.temperature = value.cast<double>();
    else if (k == "top_k") p.top_k = value.cast<int64_t>();
    else if (k == "top_p") p.top_p = value.cast<double>();
    else if (k == "min_p") p.min_p = value.cast<double>();
    else if (k == "repetition_penalty") p.repetition_penalty = value.cast<double>();
    else if (k == "presence_penalty") p.presence_penalty = value.cast<double>();
    else if (k == "frequency_penalty") p.frequency_penalty = value.cast<double>();
    else if (k == "seed") p.seed = value.cast<uint64_t>();
    else if (k == "stop") p.stop = value.cast<std::vector<std::string>>();
    else if (k == "ignore_eos") p.ignore_eos = value.cast<bool>();
    else
      COLOSSAL_FAIL("[llama] unknown sampling option '", k, "' (expected max_new_tokens, temperature, top_k, top_p, "
                    "min_p, repetition_penalty, presence_penalty, frequency_penalty, seed, stop, ignore_eos)");
  }
  p.validate();
  return p;
}

// The OpenAI server on a thread of its own: start() returns once it listens, stop() drains it.
class Server {
 public:
  Server(std::shared_ptr<Generator> generator, llama_app::ServerOptions options)
      : generator_(std::move(generator)),
        server_(std::make_unique<llama_app::OpenAIServer>(*generator_->loaded.engine, generator_->loaded.tokenizer,
                                                          options)) {}
  ~Server() { stop(); }

  void start() {
    COLOSSAL_CHECK(!thread_.joinable(), "[llama] the server is already running");
    thread_ = std::thread([this] {
      try {
        server_->serve();
      } catch (const std::exception& e) {
        error_ = error_text(e);
      }
      finished_ = true;
    });
  }
  /// Refuses new requests, lets in-flight ones finish, then returns.
  void stop() {
    if (!thread_.joinable()) return;
    server_->stop();
    thread_.join();
  }
  bool running() const { return thread_.joinable() && !finished_; }
  const std::string& error() const { return error_; }

 private:
  std::shared_ptr<Generator> generator_;
  std::unique_ptr<llama_app::OpenAIServer> server_;
  std::thread thread_;
  std::atomic<bool> finished_{false};
  std::string error_;
};

}  // namespace

void bind_llama(py::module_& m) {
  auto l = m.def_submodule("llama", "LLaMA models: tokenizer, training model, generation engine, server");

  py::class_<text::Tokenizer, std::shared_ptr<text::Tokenizer>>(
      l, "Tokenizer", "a model's tokenizer: a directory's tokenizer.json (first) or tokenizer.model, or either file")
      .def(py::init([](const std::string& path) { return std::shared_ptr<text::Tokenizer>(llama::load_tokenizer(path)); }),
           py::arg("path"))
      .def("encode", &text::Tokenizer::encode_with, py::arg("text"), py::arg("add_bos") = true, py::arg("add_eos") = false)
      .def("decode", &text::Tokenizer::decode, py::arg("ids"), py::arg("skip_special_tokens") = false)
      .def_property_readonly("vocab_size", &text::Tokenizer::vocab_size)
      .def_property_readonly("bos_id", &text::Tokenizer::bos_id)
      .def_property_readonly("eos_id", &text::Tokenizer::eos_id)
      .def_property_readonly("pad_id", &text::Tokenizer::pad_id)
      .def_property_readonly("path", &text::Tokenizer::origin);

  py::class_<CausalLM, std::shared_ptr<CausalLM>>(l, "CausalLM", "LlamaForCausalLM (C++), for training")
      .def_static("load_pretrained", [](const std::string& dir) {
            py::gil_scoped_release nogil;
            auto loaded = llama::load_pretrained(dir);
            auto out = std::make_shared<CausalLM>();
            out->config = loaded.config;
            out->model = loaded.model;
            return out;
          },
          py::arg("dir"), "a Hugging Face directory (config.json + safetensors); every weight must match")
      .def_static("from_config_json", [](const std::string& text) {
            auto out = std::make_shared<CausalLM>();
            out->config = llama::LlamaConfig::from_json_text(text, "config");
            out->model = llama::LlamaForCausalLM(out->config);
            return out;
          },
          py::arg("text"), "a new model (initialised as for training from scratch) from config.json's text")
      .def("forward", [](CausalLM& self, const at::Tensor& ids) {
            py::gil_scoped_release nogil;
            return self.model->forward(ids);
          })
      .def("loss", [](CausalLM& self, const at::Tensor& ids, const at::Tensor& labels) {
            py::gil_scoped_release nogil;
            return self.model->loss(ids, labels);
          })
      .def("named_parameters", [](CausalLM& self) {
            std::vector<std::pair<std::string, at::Tensor>> out;
            for (const auto& p : self.model->named_parameters()) out.emplace_back(p.key(), p.value());
            return out;
          })
      .def("train", [](CausalLM& self, bool mode) { self.model->train(mode); }, py::arg("mode") = true)
      .def_property_readonly("training", [](const CausalLM& self) { return self.model->is_training(); })
      .def_property_readonly("config_json", [](const CausalLM& self) { return self.config.to_json(); })
      .def("cpp_module", [](CausalLM& self) { return CppModule{self.model.ptr()}; })
      .def("save_pretrained",
           [](CausalLM& self, const std::string& dir, BoostedModel* boosted, const text::Tokenizer* tokenizer, bool write) {
             py::gil_scoped_release nogil;
             // Under a plugin the whole weights are gathered (a collective under ZeRO-3: every
             // rank calls this; `write` says which one writes).
             auto state = boosted ? boosted->optimizer().model_wrapper().checkpoint().model_state_to_save(*self.model)
                                  : checkpoint::model_state(*self.model);
             state = peft::merged_state(state, *self.model);  // LoRA adapters (if any) folded in
             if (write) llama::save_pretrained(self.config, state, dir, {}, tokenizer);
           },
           py::arg("dir"), py::arg("boosted").none(true), py::arg("tokenizer").none(true), py::arg("write"));

  py::class_<Generator, std::shared_ptr<Generator>>(l, "Generator", "the paged-KV-cache engine over a model directory")
      .def(py::init(&make_generator), py::arg("options"))
      .def("generate", [](Generator& g, const std::vector<std::string>& prompts, const py::dict& sampling) {
            const auto params = sampling_from(sampling);
            std::vector<inference::GenerationRequest> requests;
            for (const auto& p : prompts) requests.push_back({g.loaded.tokenizer->encode(p, true), params, {}});
            std::vector<inference::GenerationResult> results;
            {
              py::gil_scoped_release nogil;
              results = g.loaded.engine->generate(std::move(requests));
            }
            py::list out;
            for (const auto& r : results) {
              COLOSSAL_CHECK(r.error.empty(), "[llama] generation failed: ", r.error);
              py::dict d;
              d["text"] = r.text;
              d["tokens"] = r.tokens;
              d["finish_reason"] = inference::to_string(r.reason);
              out.append(d);
            }
            return out;
          },
          py::arg("prompts"), py::arg("sampling"));

  l.def("engine_settings", [] {
        std::vector<std::string> names;
        for (const auto& o : list_options(llama_app::EngineSetup{})) names.push_back(o.name);
        return names;
      },
      "the engine's settings (infer_llama's flags of the same names): apps/llama/engine_setup.h");

  l.def("check_sampling", [](const py::dict& sampling) { sampling_from(sampling); }, py::arg("sampling"),
        "raises naming an unknown or out-of-range sampling option");

  py::class_<Server, std::shared_ptr<Server>>(l, "Server", "the OpenAI-compatible HTTP server on a thread")
      .def(py::init([](std::shared_ptr<Generator> g, const std::string& host, int port, const std::string& name) {
             llama_app::ServerOptions o;
             o.host = host;
             o.port = port;
             o.model_name = name;
             o.adapter_names = g->loaded.adapter_names;  // --lora NAME=DIR: picked by a request's "model"
             o.defaults.max_tokens = 16;  // OpenAI's defaults for what a request leaves out
             o.defaults.temperature = 1.0;
             o.defaults.top_p = 1.0;
             return std::make_shared<Server>(std::move(g), o);
           }),
           py::arg("generator"), py::arg("host"), py::arg("port"), py::arg("model_name"))
      .def("start", &Server::start)
      .def("stop", [](Server& s) {
        py::gil_scoped_release nogil;
        s.stop();
      })
      .def_property_readonly("running", &Server::running)
      .def_property_readonly("error", &Server::error);
}

}  // namespace colossal::python
