#pragma once
// colossal merge: a Hugging Face model directory with a PEFT LoRA adapter folded into its
// weights, written as a plain Hugging Face directory (no adapter needed to load it).
#include <CLI/CLI.hpp>

#include <string>

namespace colossal::apps {

struct MergeArgs {
  std::string model;    // the base: config.json and *.safetensors
  std::string adapter;  // adapter_config.json + adapter_model.safetensors (PEFT's, or train_llama's OUTPUT/adapter)
  std::string output;
  std::string dtype;    // "" keeps each tensor's; fp32 | bf16 | fp16 converts floating tensors
};

CLI::App* add_merge_command(CLI::App& app, MergeArgs& args);
int run_merge(const MergeArgs& args);

}  // namespace colossal::apps
