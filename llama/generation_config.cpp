#include "llama/generation_config.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "core/common/check.h"

namespace colossal::llama {

GenerationDefaults GenerationDefaults::read(const std::string& dir) {
  GenerationDefaults g;
  const std::string path = dir + "/generation_config.json";
  std::ifstream in(path);
  if (!in.good()) return g;
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json js;
  try {
    js = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::parse_error& e) {
    COLOSSAL_FAIL("[llama] ", path, ": not valid JSON: ", e.what());
  }
  auto number = [&](const char* key, std::optional<double>& out) {
    if (!js.contains(key) || js[key].is_null()) return;
    COLOSSAL_CHECK(js[key].is_number(), "[llama] ", path, ": field '", key, "' expected a number, found ", js[key].dump());
    out = js[key].get<double>();
  };
  auto integer = [&](const char* key, std::optional<int64_t>& out) {
    if (!js.contains(key) || js[key].is_null()) return;
    COLOSSAL_CHECK(js[key].is_number_integer(), "[llama] ", path, ": field '", key, "' expected an integer, found ",
                   js[key].dump());
    out = js[key].get<int64_t>();
  };
  if (js.contains("do_sample") && !js["do_sample"].is_null()) {
    COLOSSAL_CHECK(js["do_sample"].is_boolean(), "[llama] ", path, ": field 'do_sample' expected true or false, found ",
                   js["do_sample"].dump());
    g.do_sample = js["do_sample"].get<bool>();
  }
  number("temperature", g.temperature);
  number("top_p", g.top_p);
  number("min_p", g.min_p);
  number("repetition_penalty", g.repetition_penalty);
  integer("top_k", g.top_k);
  integer("max_new_tokens", g.max_new_tokens);
  if (js.contains("eos_token_id") && !js["eos_token_id"].is_null()) {
    const auto& e = js["eos_token_id"];
    const auto bad = [&] { COLOSSAL_FAIL("[llama] ", path, ": field 'eos_token_id' expected an integer or a list of them, found ", e.dump()); };
    if (e.is_number_integer()) {
      g.eos_token_ids = {e.get<int64_t>()};
    } else if (e.is_array()) {
      for (const auto& v : e) {
        if (!v.is_number_integer()) bad();
        g.eos_token_ids.push_back(v.get<int64_t>());
      }
    } else {
      bad();
    }
  }
  return g;
}

}  // namespace colossal::llama
