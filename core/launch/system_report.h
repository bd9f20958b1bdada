#pragma once
// What `colossal check` prints: what a user needs when reporting a problem.
#include <string>

namespace colossal::launch {

/// Versions (LibTorch, compiler), BLAS and a measured GEMM rate, threads, Gloo/NCCL/CUDA
/// availability, cores and memory. Runs a one-rank Gloo group to prove Gloo works.
std::string system_report();

}  // namespace colossal::launch
