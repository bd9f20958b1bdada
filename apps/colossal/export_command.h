#pragma once
// colossal export --gguf FILE --model DIR [--outtype f16|q8_0|q4_0|bf16|f32|q4_k_m|q5_k_m|q6_k]:
// a Hugging Face LLaMA-architecture directory (one train_llama wrote, or merged) as a GGUF file llama.cpp runs.
#include <CLI/CLI.hpp>

#include <string>

namespace colossal::apps {

struct ExportArgs {
  std::string model;  // the Hugging Face directory
  std::string gguf;   // the file to write
  std::string outtype = "f16";
};

CLI::App* add_export_command(CLI::App& app, ExportArgs& args);
int run_export(const ExportArgs& args);

}  // namespace colossal::apps
