#include "apps/colossal/export_command.h"

#include <cstdio>

#include "llama/gguf_export.h"

namespace colossal::apps {

CLI::App* add_export_command(CLI::App& app, ExportArgs& args) {
  auto* cmd = app.add_subcommand("export", "write a Hugging Face LLaMA-architecture directory as a GGUF file for "
                                           "llama.cpp (tokenizer and chat template included)");
  cmd->add_option("--model", args.model, "the Hugging Face directory (config.json, *.safetensors, tokenizer.model)")
      ->required();
  cmd->add_option("--gguf", args.gguf, "the GGUF file to write (atomically)")->required();
  cmd->add_option("--outtype", args.outtype,
                  "the matrices' type: f16 | q8_0 | q4_0 | bf16 | f32, or a K-quant mix as llama-quantize "
                  "makes it: q4_k_m | q5_k_m | q6_k (norms stay f32; a quantized type keeps f16 for a matrix "
                  "whose rows are not whole blocks of 32, a K-quant q8_0 where they are not 256)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m", "q5_k_m", "q6_k"}));
  return cmd;
}

int run_export(const ExportArgs& args) {
  llama::GgufExportOptions o;
  o.outtype = args.outtype;
  const auto r = llama::export_gguf(args.model, args.gguf, o);
  std::printf("exported %s as %s (%s): %ld tensors, %.1f MB\n", args.model.c_str(), args.gguf.c_str(),
              args.outtype.c_str(), static_cast<long>(r.tensors), r.bytes / 1e6);
  return 0;
}

}  // namespace colossal::apps
