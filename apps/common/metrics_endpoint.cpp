#include "apps/common/metrics_endpoint.h"

#include <httplib.h>

#include <cmath>
#include <set>
#include <sstream>
#include <thread>

#include "core/common/check.h"
#include "core/common/env.h"

namespace colossal::apps {

struct MetricsEndpoint::Server {
  httplib::Server http;
  std::thread thread;
};

MetricsEndpoint::MetricsEndpoint(int port) : server_(std::make_unique<Server>()) {
  restarts_ = static_cast<int>(env_int("TORCHELASTIC_RESTART_COUNT").value_or(0));
  server_->http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(text(), "text/plain; version=0.0.4");
  });
  port_ = port == 0 ? server_->http.bind_to_any_port("0.0.0.0") : (server_->http.bind_to_port("0.0.0.0", port) ? port : -1);
  COLOSSAL_CHECK(port_ > 0, "[metrics] --metrics_port ", port, ": cannot listen on 0.0.0.0:", port,
                 " (is the port in use?)");
  server_->thread = std::thread([this] { server_->http.listen_after_bind(); });
}

MetricsEndpoint::~MetricsEndpoint() {
  server_->http.stop();
  if (server_->thread.joinable()) server_->thread.join();
}

std::string MetricsEndpoint::metric_name(const std::string& name) {
  std::string n = name;
  if (n.size() > 2 && n.compare(n.size() - 2, 2, "/s") == 0) n = n.substr(0, n.size() - 2) + "_per_second";
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  return n;
}

void MetricsEndpoint::record_step(const std::string& task, int64_t step, int64_t total_steps,
                                  const std::vector<std::pair<std::string, double>>& metrics) {
  std::lock_guard<std::mutex> lock(mu_);
  Task& t = tasks_[task];
  t.step = static_cast<double>(step);
  t.gauges["colossal_train_total_steps"] = static_cast<double>(total_steps);
  for (const auto& [k, v] : metrics) {
    if (k == "mem_gib") {
      t.gauges["colossal_train_resident_memory_bytes"] = v * 1024.0 * 1024.0 * 1024.0;
    } else {
      t.gauges["colossal_train_" + metric_name(k)] = v;
    }
  }
}

void MetricsEndpoint::record_eval(const std::string& task, const std::vector<std::pair<std::string, double>>& metrics) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [k, v] : metrics) tasks_[task].gauges["colossal_train_eval_" + metric_name(k)] = v;
}

void MetricsEndpoint::record_checkpoint(const std::string& task, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  Task& t = tasks_[task];
  t.checkpoint_step = static_cast<double>(step);
  t.checkpoint_at = std::chrono::steady_clock::now();
}

std::string MetricsEndpoint::text() const {
  std::lock_guard<std::mutex> lock(mu_);
  // Prometheus text: each metric's HELP/TYPE once, then one sample per task.
  std::map<std::string, std::vector<std::pair<std::string, double>>> samples;  // name -> (task, value)
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [task, t] : tasks_) {
    samples["colossal_train_step"].push_back({task, t.step});
    for (const auto& [name, v] : t.gauges) samples[name].push_back({task, v});
    if (t.checkpoint_step >= 0) {
      samples["colossal_train_last_checkpoint_step"].push_back({task, t.checkpoint_step});
      samples["colossal_train_last_checkpoint_age_seconds"].push_back(
          {task, std::chrono::duration<double>(now - t.checkpoint_at).count()});
    }
  }
  std::ostringstream out;
  out.precision(10);
  for (const auto& [name, values] : samples) {
    const bool counter = name == "colossal_train_step";
    out << "# HELP " << name << " " << (counter ? "optimizer steps finished" : "the training job's latest value")
        << "\n# TYPE " << name << (counter ? " counter" : " gauge") << "\n";
    for (const auto& [task, v] : values) {
      out << name << "{task=\"" << task << "\"} ";
      if (std::isnan(v)) out << "NaN";
      else if (std::isinf(v)) out << (v > 0 ? "+Inf" : "-Inf");
      else out << v;
      out << "\n";
    }
  }
  out << "# HELP colossal_train_restarts restarts of the job by its launcher (TORCHELASTIC_RESTART_COUNT)\n"
      << "# TYPE colossal_train_restarts gauge\ncolossal_train_restarts " << restarts_ << "\n";
  return out.str();
}

}  // namespace colossal::apps
