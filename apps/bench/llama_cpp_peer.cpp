#include "apps/bench/llama_cpp_peer.h"

#include <cctype>
#include <cstdio>
#include <sstream>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include "core/common/check.h"

namespace colossal::bench {
namespace {

// Runs a shell command; returns its standard output, throws with the tail of its output on failure.
std::string run(const std::string& command, const std::string& what) {
  std::string out;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  COLOSSAL_CHECK(p != nullptr, "cannot start ", what);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = ::pclose(p);
  COLOSSAL_CHECK(rc == 0, what, " failed (exit ", WEXITSTATUS(rc), "): ",
                 out.size() > 2000 ? out.substr(out.size() - 2000) : out, "\ncommand: ", command);
  return out;
}

std::string last_line(const std::string& s) {
  auto end = s.find_last_not_of("\n ");
  if (end == std::string::npos) return "";
  auto start = s.find_last_of('\n', end);
  return s.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

}  // namespace

LlamaCppPeer LlamaCppPeer::locate(const std::string& source_dir, const std::string& python, const std::string& bin_dir) {
  LlamaCppPeer p;
  p.python = python;
  const std::string script = source_dir + "/scripts/build_llama_cpp.sh";
  p.bin_dir = bin_dir.empty() ? last_line(run("bash " + script, "building llama.cpp (" + script + ")")) : bin_dir;
  p.converter = last_line(run("bash " + script + " --root", "locating llama.cpp's source")) + "/convert_hf_to_gguf.py";
  return p;
}

bool LlamaCppPeer::is_kquant_mix(const std::string& p) {
  for (const char* k : {"q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m", "q6_k"})
    if (p == k) return true;
  return false;
}

std::map<std::string, std::string> LlamaCppPeer::convert(const std::string& model_dir, const std::string& out_prefix,
                                                         const std::vector<std::string>& precisions) const {
  std::map<std::string, std::string> files;
  auto convert_to = [&](const std::string& outtype) {
    std::string file = out_prefix + "-" + outtype + ".gguf";
    run(python + " " + converter + " " + model_dir + " --outtype " + outtype + " --outfile " + file,
        "llama.cpp's converter (" + outtype + ")");
    return file;
  };
  std::string f32;
  for (const auto& p : precisions) {
    if (is_kquant_mix(p)) {
      if (f32.empty()) f32 = convert_to("f32");
      std::string type = p;
      for (auto& ch : type) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      const std::string file = out_prefix + "-" + p + ".gguf";
      run(bin_dir + "/llama-quantize " + f32 + " " + file + " " + type, "llama-quantize " + type);
      files[p] = file;
      continue;
    }
    if (p == "fp32" || p == "int8" || p == "int4") {
      if (f32.empty()) f32 = convert_to("f32");
      if (p == "fp32") files[p] = f32;
    }
    if (p == "bf16") files[p] = convert_to("bf16");
    if (p == "fp16") files[p] = convert_to("f16");
    if (p == "int8" || p == "int4") {
      const std::string type = p == "int8" ? "q8_0" : "q4_0", file = out_prefix + "-" + type + ".gguf";
      run(bin_dir + "/llama-quantize --pure " + f32 + " " + file + " " + type, "llama-quantize " + type);
      files[p] = file;
    }
  }
  return files;
}

std::map<std::string, std::map<int, LlamaCppPeer::Speed>> LlamaCppPeer::bench(const std::vector<std::string>& files,
                                                                              const std::vector<int>& threads,
                                                                              int prompt, int decode,
                                                                              int repeats) const {
  std::string models, counts;
  for (const auto& f : files) models += (models.empty() ? "" : ",") + f;
  for (int t : threads) counts += (counts.empty() ? "" : ",") + std::to_string(t);
  std::string out = run(bin_dir + "/llama-bench -o json -m " + models + " -t " + counts + " -p " +
                            std::to_string(prompt) + " -n " + std::to_string(decode) + " -r " + std::to_string(repeats),
                        "llama-bench");
  auto start = out.find('[');
  COLOSSAL_CHECK(start != std::string::npos, "llama-bench printed no JSON: ", out);
  auto rows = nlohmann::json::parse(out.substr(start, out.rfind(']') - start + 1));
  std::map<std::string, std::map<int, Speed>> result;
  for (const auto& r : rows) {
    auto& s = result[r.at("model_filename").get<std::string>()][r.at("n_threads").get<int>()];
    const double tps = r.at("avg_ts").get<double>();
    if (r.at("n_gen").get<int>() > 0) s.decode_tps = tps;
    else s.prompt_tps = tps;
  }
  return result;
}

LlamaCppPeer::Speed LlamaCppPeer::batched(const std::string& file, int threads, int prompt, int decode,
                                          int parallel) const {
  const int ctx = parallel * (prompt + decode) + 64;
  std::string out = run(bin_dir + "/llama-batched-bench --output-format jsonl -m " + file + " -t " +
                            std::to_string(threads) + " -tb " + std::to_string(threads) + " -c " + std::to_string(ctx) +
                            " -b 2048 -ub 512 -npp " + std::to_string(prompt) + " -ntg " + std::to_string(decode) +
                            " -npl " + std::to_string(parallel),
                        "llama-batched-bench");
  Speed s;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("\"speed_tg\"") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line.substr(line.find('{')));
    s.prompt_tps = j.at("speed_pp").get<double>();
    s.decode_tps = j.at("speed_tg").get<double>();
  }
  COLOSSAL_CHECK(s.decode_tps > 0, "llama-batched-bench printed no result: ", out);
  return s;
}

}  // namespace colossal::bench
