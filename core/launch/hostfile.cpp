#include "core/launch/hostfile.h"

#include <fstream>
#include <set>
#include <sstream>

#include "core/common/check.h"

namespace colossal::launch {

std::vector<HostEntry> parse_hostfile_text(const std::string& text, const std::string& origin) {
  std::vector<HostEntry> hosts;
  std::set<std::string> seen;
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    auto hash = raw.find('#');
    if (hash != std::string::npos) raw.resize(hash);
    std::istringstream fields(raw);
    std::string host;
    if (!(fields >> host)) continue;
    HostEntry e{host, 0, line_no};
    std::string field;
    while (fields >> field) {
      const std::string key = "slots=";
      COLOSSAL_CHECK(field.rfind(key, 0) == 0, "[launch] ", origin, " line ", line_no,
                     ": expected 'HOST [slots=N]', found '", field, "'");
      std::string v = field.substr(key.size());
      char* end = nullptr;
      long slots = std::strtol(v.c_str(), &end, 10);
      COLOSSAL_CHECK(!v.empty() && *end == '\0' && slots >= 1, "[launch] ", origin, " line ",
                     line_no, ": expected slots=N with N >= 1, found '", field, "'");
      e.slots = static_cast<int>(slots);
    }
    COLOSSAL_CHECK(seen.insert(host).second, "[launch] ", origin, " line ", line_no, ": host '",
                   host, "' is listed twice");
    hosts.push_back(e);
  }
  COLOSSAL_CHECK(!hosts.empty(), "[launch] ", origin, " lists no hosts");
  return hosts;
}

std::vector<HostEntry> parse_hostfile(const std::string& path) {
  std::ifstream in(path);
  COLOSSAL_CHECK(in.good(), "[launch] cannot open hostfile '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_hostfile_text(ss.str(), "hostfile '" + path + "'");
}

}  // namespace colossal::launch
