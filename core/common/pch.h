// Precompiled header for every target that includes LibTorch (see cmake: colossal_use_pch).
// Only stable, heavy headers belong here.
#pragma once
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>
