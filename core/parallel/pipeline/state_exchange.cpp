#include "core/parallel/pipeline/state_exchange.h"

#include <ATen/ATen.h>

#include <cstring>
#include <sstream>

#include "core/common/check.h"
#include "core/dist/collectives.h"

namespace colossal::parallel::pipeline {

std::vector<std::string> all_names(const dist::Group& group, const std::vector<std::string>& mine) {
  std::string text;
  for (const auto& n : mine) text += n + "\n";
  std::vector<std::string> out;
  for (int r = 0; r < group.size(); ++r) {
    std::istringstream in(dist::broadcast_text(text, r, group));
    for (std::string line; std::getline(in, line);) out.push_back(line);
  }
  return out;
}

NamedState gather_to_first(const dist::Group& group, NamedState mine) {
  if (!group.is_member() || group.size() == 1) return mine;
  // Names, dtypes and shapes first (one line per tensor), then the data in that order.
  for (int r = 1; r < group.size(); ++r) {
    std::string header;
    if (group.rank() == r)
      for (const auto& [name, t] : mine) {
        header += name + "\t" + std::to_string(static_cast<int>(t.scalar_type()));
        for (auto d : t.sizes()) header += "\t" + std::to_string(d);
        header += "\n";
      }
    header = dist::broadcast_text(header, r, group);  // small; every rank learns the layout
    if (group.rank() == r) {
      for (const auto& [name, t] : mine)
        if (t.numel() > 0) dist::send(t.detach().to(at::kCPU).contiguous(), 0, group);
    } else if (group.rank() == 0) {
      std::istringstream in(header);
      for (std::string line; std::getline(in, line);) {
        std::istringstream fields(line);
        std::string name, field;
        std::getline(fields, name, '\t');
        std::getline(fields, field, '\t');
        const auto dtype = static_cast<c10::ScalarType>(std::stoi(field));
        std::vector<int64_t> shape;
        while (std::getline(fields, field, '\t')) shape.push_back(std::stoll(field));
        auto t = at::empty(shape, at::TensorOptions().dtype(dtype));
        if (t.numel() > 0) dist::recv(t, r, group);
        mine.emplace_back(name, t);
      }
    }
  }
  return mine;
}

}  // namespace colossal::parallel::pipeline
