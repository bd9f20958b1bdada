#include "apps/colossal/merge_command.h"

#include <cstdio>

#include "core/amp/precision.h"
#include "core/peft/lora.h"

namespace colossal::apps {

CLI::App* add_merge_command(CLI::App& app, MergeArgs& args) {
  auto* merge = app.add_subcommand("merge", "fold a LoRA adapter into its base model: a plain Hugging Face directory");
  merge->add_option("--model", args.model, "the base model's Hugging Face directory")->required();
  merge->add_option("--adapter", args.adapter, "the adapter directory (adapter_config.json, adapter_model.safetensors)")
      ->required();
  merge->add_option("--output", args.output, "the merged model's directory")->required();
  merge->add_option("--dtype", args.dtype, "fp32 | bf16 | fp16: convert the merged weights (default: as stored)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  return merge;
}

int run_merge(const MergeArgs& args) {
  std::optional<c10::ScalarType> dtype;
  if (!args.dtype.empty()) dtype = amp::low_precision_dtype(amp::parse_precision(args.dtype));
  const auto merged = peft::write_merged_model(args.model, args.adapter, args.output, dtype);
  std::printf("merged %s into %s: %zu tensors (%.1f MB) and %d other files in %s\n", args.adapter.c_str(),
              args.model.c_str(), merged.tensors, merged.bytes / 1e6, merged.other_files, args.output.c_str());
  return 0;
}

}  // namespace colossal::apps
