#pragma once
// The applications as functions: each app's job is `RunSummary NAME(arguments)` in its library
// (train_llama, train_vit), which the binary's main() and the Python module (colossal.llama.train)
// both call with the same command-line arguments. The function throws on errors; main() prints
// them, Python raises them.
#include <map>
#include <string>
#include <vector>

namespace colossal::apps {

/// What a finished job reports back to a caller that is not reading its standard output.
struct RunSummary {
  int exit_code = 0;                           // non-zero only for --help-like early exits
  std::map<std::string, double> metrics;       // "loss", "eval_loss", "steps", ...
  std::map<std::string, std::string> outputs;  // "model": the directory written, ...
};

/// argv[1..] as strings.
std::vector<std::string> arguments_of(int argc, char** argv);

/// Calls `parse(argc, argv)` with `program` as argv[0] and `args` after it (CLI parsers take
/// mutable C strings).
template <typename Parse>
auto with_argv(const std::string& program, const std::vector<std::string>& args, Parse&& parse) {
  std::vector<std::string> storage;
  storage.reserve(args.size() + 1);
  storage.push_back(program);
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  return parse(static_cast<int>(storage.size()), argv.data());
}

/// The body of every app function: parses `args` with parse(argc, argv, settings, exit_code)
/// (false: a --help-like stop, whose exit code is returned), then runs job(settings, summary).
template <typename Settings, typename Parse, typename Job>
RunSummary run_job(const std::string& program, const std::vector<std::string>& args, Parse&& parse, Job&& job) {
  RunSummary summary;
  Settings settings;
  int code = 0;
  if (!with_argv(program, args, [&](int argc, char** argv) { return parse(argc, argv, settings, code); })) {
    summary.exit_code = code;
    return summary;
  }
  job(settings, summary);
  return summary;
}

/// main() for an app function: runs it, prints an error as "PROGRAM: message" and returns 1 (an
/// Interrupted job: 128 + the signal, as a shell reports a job a signal ended).
int run_main(const char* program, int argc, char** argv, RunSummary (*job)(const std::vector<std::string>&));

/// main() for a training app: run_main, with SIGINT and SIGTERM asking the training loop to stop
/// (it finishes the step, writes a checkpoint and says where; apps/common/train_loop.h) instead of
/// ending the process. A second signal ends it at once.
int run_training_main(const char* program, int argc, char** argv,
                      RunSummary (*job)(const std::vector<std::string>&));

}  // namespace colossal::apps
