#pragma once
// generate_video as a function (the binary's main and the Python module call it).
#include <string>
#include <vector>

#include "apps/common/app_entry.h"

namespace colossal::sora_app {

colossal::apps::RunSummary generate_video(const std::vector<std::string>& args);

}  // namespace colossal::sora_app
