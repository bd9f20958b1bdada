#include "core/launch/system_report.h"

#include <sys/utsname.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "core/common/check.h"
#include "core/dist/backend_factory.h"

namespace colossal::launch {
namespace {

std::string meminfo_field(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      std::istringstream ss(line.substr(field.size() + 1));
      double kb = 0;
      ss >> kb;
      std::ostringstream out;
      out.precision(1);
      out << std::fixed << kb / (1024.0 * 1024.0) << " GiB";
      return out.str();
    }
  }
  return "unknown";
}

std::string config_line(const std::string& config, const std::string& key) {
  auto pos = config.find(key);
  if (pos == std::string::npos) return "unknown";
  auto end = config.find_first_of(",\n", pos);
  return config.substr(pos + key.size(), end - pos - key.size());
}

double gemm_gflops() {
  auto a = torch::randn({1024, 1024});
  auto b = torch::randn({1024, 1024});
  (void)torch::mm(a, b);  // warm-up
  int reps = 5;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) (void)torch::mm(a, b);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * 1024 * 1024 * 1024 * reps / s / 1e9;
}

std::string gloo_status() {
  try {
    auto store = c10::make_intrusive<c10d::HashStore>();
    auto pg = dist::make_gloo_backend(store, 0, 1, dist::BackendOptions{});
    std::vector<at::Tensor> t{torch::ones({4})};
    pg->allreduce(t)->wait();
    return "available (one-rank all-reduce ok)";
  } catch (const std::exception& e) {
    return "NOT usable: " + error_text(e);
  }
}

}  // namespace

std::string system_report() {
  std::ostringstream r;
  utsname u{};
  ::uname(&u);
  std::string config = torch::show_config();
  r << "colossal-cpp system report\n";
  r << "  os:                " << u.sysname << " " << u.release << " " << u.machine << "\n";
  r << "  compiler:          " << "g++ " << __VERSION__ << " (C++ " << __cplusplus << ")\n";
  r << "  libtorch:          " << TORCH_VERSION << "\n";
  r << "  blas:              " << config_line(config, "BLAS_INFO=") << "\n";
  r << "  lapack:            " << config_line(config, "LAPACK_INFO=") << "\n";
  r << "  cpu capability:    " << config_line(config, "CPU capability usage: ") << "\n";
  r << "  fp32 gemm 1024^2:  " << static_cast<int>(gemm_gflops()) << " GFLOP/s (measured, "
    << at::get_num_threads() << " threads)\n";
  r << "  intra-op threads:  " << at::get_num_threads() << " (OMP_NUM_THREADS="
    << (std::getenv("OMP_NUM_THREADS") ? std::getenv("OMP_NUM_THREADS") : "unset") << ")\n";
  r << "  inter-op threads:  " << at::get_num_interop_threads() << "\n";
  r << "  cores:             " << ::sysconf(_SC_NPROCESSORS_ONLN) << " online\n";
  r << "  memory:            " << meminfo_field("MemTotal") << " total, "
    << meminfo_field("MemAvailable") << " available\n";
  r << "  gloo:              " << gloo_status() << "\n";
  r << "  cuda:              "
    << (torch::cuda::is_available()
            ? std::to_string(torch::cuda::device_count()) + " device(s)"
            : std::string("no device visible"))
    << "\n";
  r << "  nccl:              "
    << (dist::nccl_available() ? "available" : "not available (CPU build or no GPU)") << "\n";
  return r.str();
}

}  // namespace colossal::launch
