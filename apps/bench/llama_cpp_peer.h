#pragma once
// llama.cpp as bench_infer's peer: the same model converted with llama.cpp's own converter (f32,
// bf16, f16; q8_0 and q4_0 quantized from the f32 file with --pure, so every matrix has the named
// format, the head included) and timed with llama-bench in the same run. llama.cpp is built from
// the source inside PyPI's llama-cpp-python sdist by scripts/build_llama_cpp.sh, outside the
// repository.
#include <map>
#include <string>
#include <vector>

namespace colossal::bench {

struct LlamaCppPeer {
  std::string bin_dir;    // llama-bench, llama-quantize
  std::string converter;  // convert_hf_to_gguf.py
  std::string python;     // runs the converter (numpy, torch, sentencepiece, transformers)

  /// Builds (or finds) llama.cpp through scripts/build_llama_cpp.sh under `source_dir`; `bin_dir`
  /// non-empty skips the build. Throws naming the step that failed.
  /// q2_k, q3_k_s/m/l, q4_k_s/m, q5_k_s/m, q6_k: llama-quantize's K-quant file types.
  static bool is_kquant_mix(const std::string& precision);
  static LlamaCppPeer locate(const std::string& source_dir, const std::string& python, const std::string& bin_dir);

  /// GGUF files of the Hugging Face directory `model_dir` for each precision in `precisions`
  /// ("fp32", "bf16", "fp16", "int8", "int4", or a K-quant mix: "q4_k_m", ... quantized by llama-quantize
  /// as it mixes them, not --pure), written next to `out_prefix`; returns precision -> file.
  std::map<std::string, std::string> convert(const std::string& model_dir, const std::string& out_prefix,
                                             const std::vector<std::string>& precisions) const;

  struct Speed {
    double prompt_tps = 0, decode_tps = 0;
  };
  /// llama-bench's mean tokens/s for a `prompt`-token prompt and `decode` generated tokens, per file
  /// and thread count: result[file][threads].
  std::map<std::string, std::map<int, Speed>> bench(const std::vector<std::string>& files, const std::vector<int>& threads,
                                                    int prompt, int decode, int repeats) const;
  /// llama-batched-bench: `parallel` sequences, each a `prompt`-token prompt then `decode` tokens
  /// decoded together (one batch per step); aggregate prompt and decode tokens/s.
  Speed batched(const std::string& file, int threads, int prompt, int decode, int parallel) const;
};

}  // namespace colossal::bench
