// colossal: the command-line front door.
//   colossal run [--nproc_per_node N] [--nnodes M --node_rank R --master_addr A --master_port P]
//                [--hostfile F] [--max_restarts K] [--tee RANK] [--config FILE] -- PROGRAM ARGS...
//   colossal verify [--nproc_per_node N] [--steps K] [--keep] -- PROGRAM ARGS...
//   colossal check
//   colossal merge --model BASE --adapter ADAPTER --output DIR [--dtype bf16]
//   colossal export --model DIR --gguf FILE [--outtype f16|q8_0|q4_0|bf16|f32|q4_k_m|q5_k_m|q6_k]
//   colossal plot metrics.jsonl [--out DIR --metrics loss lr ...]
//   colossal analyze --model_config config.json [--seq N --batch B --precision P --world 1 2 4 --json F]
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "apps/colossal/analyze_command.h"
#include "apps/colossal/export_command.h"
#include "apps/colossal/merge_command.h"
#include "apps/colossal/plot_command.h"
#include "core/common/check.h"
#include "core/common/config.h"
#include "core/launch/launcher.h"
#include "core/launch/system_report.h"
#include "core/launch/verify.h"

int main(int argc, char** argv) {
  // Everything after "--" is the program to launch; CLI11 never sees it.
  std::vector<std::string> command;
  int cli_argc = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      command.assign(argv + i + 1, argv + argc);
      cli_argc = i;
      break;
    }
  }

  CLI::App app{"colossal-cpp: launch and inspect distributed jobs"};
  app.require_subcommand(1);

  colossal::launch::LaunchOptions opts;
  std::string config_file;
  int tee = -1;
  auto* run = app.add_subcommand("run", "start the ranks of a job (torchrun-style; torchrun's flag spellings and "
                                       "PET_* variables work too)");
  // Defaults from torchrun's PET_* variables (a Kubeflow pod's environment); flags and --config win.
  opts.read_torchrun_environment();
  // Values torchrun writes in forms other than a number: applied after parsing (apply_run_flags).
  std::string nproc_flag, nnodes_flag, rdzv_endpoint, rdzv_backend, rdzv_conf;
  bool standalone = false, no_python = false;
  run->add_option("--nproc_per_node,--nproc-per-node", nproc_flag,
                  "ranks on this node: N, or auto | cpu | gpu (torchrun's; auto: the GPUs, else 1)")
      ->default_str(std::to_string(opts.nproc_per_node));
  run->add_option("--nnodes", nnodes_flag, "number of nodes, or MIN:MAX (elastic)")
      ->default_str(std::to_string(opts.nnodes));
  run->add_option("--node_rank,--node-rank", opts.node_rank, "this node's index")->capture_default_str();
  run->add_option("--master_addr,--master-addr", opts.master_addr,
                  "host of node 0 (rendezvous); default: the hostfile's first host, else "
                  "127.0.0.1");
  run->add_option("--master_port,--master-port", opts.master_port,
                  "rendezvous port; 0 picks a free one (default: free port on one node, 29500 "
                  "on several)");
  run->add_option("--rdzv_endpoint,--rdzv-endpoint", rdzv_endpoint,
                  "torchrun's HOST[:PORT] of the rendezvous (the same as --master_addr/--master_port; port 29400 "
                  "when absent)");
  run->add_option("--rdzv_backend,--rdzv-backend", rdzv_backend, "c10d or static: both are our store rendezvous");
  run->add_option("--rdzv_id,--rdzv-id", opts.rdzv_id, "torchrun's job id (accepted; one job per store)");
  run->add_option("--rdzv_conf,--rdzv-conf", rdzv_conf,
                  "torchrun's KEY=VALUE,...: join_timeout (seconds, as --rdzv_timeout), last_call_timeout "
                  "(elastic: seconds to wait for more nodes once MIN joined); others accepted");
  run->add_flag("--standalone", standalone, "one node on a free local port (torchrun's)");
  run->add_flag("--no_python,--no-python", no_python, "accepted for torchrun's command lines: the program runs as given");
  run->add_option("--hostfile", opts.hostfile,
                  "one 'HOST [slots=N]' per line; this machine is the first, the others are "
                  "started over ssh");
  run->add_option("--ssh", opts.ssh, "command used to reach the hostfile's hosts")
      ->capture_default_str();
  run->add_option("--max_restarts,--max-restarts", opts.max_restarts, "restart the whole group after a failure")
      ->capture_default_str();
  run->add_option("--tee", tee, "show only this rank's output");
  run->add_option("--grace_period", opts.grace_period_s,
                  "seconds between SIGTERM and SIGKILL when stopping ranks")
      ->capture_default_str();
  run->add_option("--finish_timeout", opts.finish_timeout_s,
                  "after a rank exits 0, stop ranks still running this many seconds later (0: wait; they "
                  "are named after 10 s)")
      ->capture_default_str();
  run->add_option("--rdzv_timeout,--rdzv-timeout", opts.rdzv_timeout_s,
                  "seconds to wait for the other nodes' launchers")
      ->capture_default_str();
  run->add_option("--config", config_file, "JSON or YAML file with these options");
  run->prefix_command();  // torchrun style also works: colossal run --nproc_per_node 2 prog args

  colossal::launch::VerifyOptions vopts;
  auto* verify = app.add_subcommand(
      "verify", "run a training program's first steps under a layout and on one process (the same global "
                "batch), and report the largest difference of loss, gradients and parameters");
  verify->add_option("--nproc_per_node", vopts.launch.nproc_per_node, "ranks of the layout")->capture_default_str();
  verify->add_option("--steps", vopts.steps, "steps recorded and compared")->capture_default_str();
  verify->add_option("--work_dir", vopts.work_dir, "where the recordings go (default: a temporary directory)");
  verify->add_flag("--keep", vopts.keep, "keep the recordings (step-K.safetensors: grad/NAME, param/NAME)");
  verify->add_option("--loss_rtol", vopts.tolerances.loss, "relative loss difference accepted (default: 1e-5 fp32, 2e-2 bf16/fp16)");
  verify->add_option("--loss_atol", vopts.tolerances.loss_abs,
                     "absolute loss difference accepted whatever the relative one (a loss that is 0 in exact "
                     "arithmetic, as GRPO's on-policy objective; default 0: off)");
  verify->add_option("--grad_rtol", vopts.tolerances.gradient,
                     "a gradient's max |difference| over its max |value| accepted (default: 1e-4 fp32, 5e-2 bf16/fp16)");
  verify->add_option("--param_rtol", vopts.tolerances.parameter,
                     "the same for parameters after each step (default: 1e-4 fp32, 2e-2 bf16/fp16)");
  verify->add_option("--tee", tee, "show only this rank's output of the layout run (default 0)");
  verify->add_option("--grace_period", vopts.launch.grace_period_s, "seconds between SIGTERM and SIGKILL")
      ->capture_default_str();
  verify->prefix_command();

  app.add_subcommand("check", "print versions, BLAS, threads, Gloo/NCCL/CUDA, cores, memory");
  colossal::apps::AnalyzeArgs analyze_args;
  colossal::apps::add_analyze_command(app, analyze_args);
  colossal::apps::MergeArgs merge_args;
  colossal::apps::add_merge_command(app, merge_args);
  colossal::apps::ExportArgs export_args;
  colossal::apps::add_export_command(app, export_args);
  colossal::apps::PlotArgs plot_args;
  colossal::apps::add_plot_command(app, plot_args);

  try {
    app.parse(cli_argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (app.got_subcommand("check")) {
      std::cout << colossal::launch::system_report();
      return 0;
    }
    if (app.got_subcommand("analyze")) return colossal::apps::run_analyze(analyze_args);
    if (app.got_subcommand("plot")) return colossal::apps::run_plot(plot_args);
    if (app.got_subcommand("merge")) return colossal::apps::run_merge(merge_args);
    if (app.got_subcommand("export")) return colossal::apps::run_export(export_args);
    if (app.got_subcommand("verify")) {
      vopts.launch.tee = tee >= 0 ? tee : 0;
      vopts.launch.command = command.empty() ? verify->remaining() : command;
      return colossal::launch::verify(vopts);
    }
    if (!config_file.empty()) {
      auto cfg = colossal::ConfigNode::load_file(config_file);
      opts.read(cfg);
      cfg.check_all_keys_used();
    }
    // Explicit flags win over the config file: parse again on top of it.
    if (!config_file.empty()) app.parse(cli_argc, argv);
    if (standalone) opts.set_standalone();
    if (!nproc_flag.empty()) opts.set_nproc_per_node(nproc_flag);
    if (!nnodes_flag.empty()) opts.set_nnodes(nnodes_flag);
    if (!rdzv_endpoint.empty()) opts.set_rdzv_endpoint(rdzv_endpoint);
    if (!rdzv_backend.empty()) opts.set_rdzv_backend(rdzv_backend);
    if (!rdzv_conf.empty()) opts.set_rdzv_conf(rdzv_conf);
    if (tee >= 0) opts.tee = tee;
    if (command.empty()) command = run->remaining();
    opts.command = command;
    return colossal::launch::run(opts);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "colossal: error: %s\n", colossal::error_text(e).c_str());
    return 2;
  }
}
