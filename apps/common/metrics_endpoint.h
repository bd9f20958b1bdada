#pragma once
// --metrics_port: a training job's figures as Prometheus text on GET /metrics, for the cluster's
// monitoring to scrape (the server has its own, apps/llama/openai_server.h). Rank 0 serves it
// from a thread of its own; the training loop only sets values (a mutex, no I/O on the step).
//
//   colossal_train_step{task="train"}                      the last finished step (counter)
//   colossal_train_total_steps, _loss, _lr, _grad_norm, _mfu, _<unit>_per_second (tokens, images, ...)
//   colossal_train_resident_memory_bytes                   rank 0's resident set at the log line
//   colossal_train_eval_<metric>                           the last evaluation
//   colossal_train_last_checkpoint_step, _last_checkpoint_age_seconds (at the scrape)
//   colossal_train_restarts                                TORCHELASTIC_RESTART_COUNT (launcher restarts)
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace colossal::apps {

class MetricsEndpoint {
 public:
  /// Listens on 0.0.0.0:`port` (0: a free port); throws naming the port when it cannot.
  explicit MetricsEndpoint(int port);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  int port() const { return port_; }
  /// A log line's figures ("loss", "tokens/s", "mem_gib", ...) for `task` at `step`.
  void record_step(const std::string& task, int64_t step, int64_t total_steps,
                   const std::vector<std::pair<std::string, double>>& metrics);
  void record_eval(const std::string& task, const std::vector<std::pair<std::string, double>>& metrics);
  void record_checkpoint(const std::string& task, int64_t step);
  /// The exposition text, as served.
  std::string text() const;
  /// "tokens/s" -> "tokens_per_second", anything else outside [a-zA-Z0-9_] -> '_'.
  static std::string metric_name(const std::string& name);

 private:
  struct Task {
    std::map<std::string, double> gauges;  // full metric names
    double step = 0;
    double checkpoint_step = -1;
    std::chrono::steady_clock::time_point checkpoint_at{};
  };
  mutable std::mutex mu_;
  std::map<std::string, Task> tasks_;
  int restarts_ = 0;
  int port_ = 0;
  struct Server;
  std::unique_ptr<Server> server_;
};

}  // namespace colossal::apps
