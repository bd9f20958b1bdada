#include "sora/data/clip_csv.h"

#include <fstream>
#include <sstream>

#include "core/checkpoint/atomic_file.h"
#include "core/common/check.h"
#include "core/common/env.h"
#include "sora/io/video.h"

namespace colossal::sora {
namespace {

// Splits one CSV line into fields (RFC 4180 quoting; no line breaks inside fields).
std::vector<std::string> split_csv(const std::string& line, const std::string& where) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') fields.back() += '"', ++i;
      else if (c == '"') quoted = false;
      else fields.back() += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else if (c != '\r') {
      fields.back() += c;
    }
  }
  COLOSSAL_CHECK(!quoted, "[clip csv] ", where, ": a quote is not closed");
  return fields;
}

std::string quote(const std::string& s) {
  if (s.find_first_of(",\"") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

template <typename T>
T number(const std::string& text, const std::string& where, const char* field) {
  std::istringstream in(text);
  T value{};
  in >> value;
  COLOSSAL_CHECK(!in.fail() && in.eof() && value > 0, "[clip csv] ", where, ": ", field, " '", text,
                 "': expected a positive number");
  return value;
}

}  // namespace

std::vector<ClipEntry> read_clip_csv(const std::string& path) {
  std::ifstream in(path);
  COLOSSAL_CHECK(in.good(), "[clip csv] cannot read '", path, "'");
  const std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  std::string line;
  std::getline(in, line);
  const auto header = split_csv(line, "'" + path + "' line 1");
  const std::vector<std::string> expected = {"path", "text", "num_frames", "height", "width", "fps"};
  COLOSSAL_CHECK(header == expected, "[clip csv] '", path, "' line 1: expected the header "
                 "path,text,num_frames,height,width,fps, found '", line, "'");
  std::vector<ClipEntry> clips;
  for (int row = 2; std::getline(in, line); ++row) {
    if (line.empty() || line == "\r") continue;
    const std::string where = "'" + path + "' line " + std::to_string(row);
    const auto f = split_csv(line, where);
    COLOSSAL_CHECK(f.size() == 6, "[clip csv] ", where, ": ", f.size(), " fields, expected 6 (", line, ")");
    COLOSSAL_CHECK(!f[0].empty(), "[clip csv] ", where, ": an empty path");
    ClipEntry c{.path = f[0][0] == '/' ? f[0] : dir + "/" + f[0], .text = f[1],
                .num_frames = number<int64_t>(f[2], where, "num_frames"), .height = number<int64_t>(f[3], where, "height"),
                .width = number<int64_t>(f[4], where, "width"), .fps = number<double>(f[5], where, "fps")};
    clips.push_back(std::move(c));
  }
  COLOSSAL_CHECK(!clips.empty(), "[clip csv] '", path, "' lists no clips");
  return clips;
}

void write_clip_csv(const std::string& path, const std::vector<ClipEntry>& clips) {
  std::ostringstream out;
  out << "path,text,num_frames,height,width,fps\n";
  for (const auto& c : clips)
    out << quote(c.path) << "," << quote(c.text) << "," << c.num_frames << "," << c.height << "," << c.width << ","
        << c.fps << "\n";
  checkpoint::write_text_atomically(path, out.str());
}

std::string default_clip_csv() {
  const std::string root = cache_root() + "/corpus/clips";
  const std::string csv = root + "/clips.csv";
  if (std::ifstream(csv).good()) return csv;
  const std::vector<std::pair<std::string, std::string>> clips = {
      {"usr/lib/python3/dist-packages/imageio/resources/images/cockatoo.mp4", "a white cockatoo looks into the camera"},
      {"usr/lib/python3/dist-packages/imageio/resources/images/realshort.mp4", "a potted tree on a windowsill"},
      {"usr/share/doc/opencv-doc/examples/data/vtest.avi", "people walk across a plaza past a lamp post"},
  };
  std::vector<ClipEntry> entries;
  for (const auto& [file, text] : clips) {
    const std::string path = root + "/" + file;
    COLOSSAL_CHECK(std::ifstream(path).good(), "[clip csv] the built-in clip '", path,
                   "' is missing: run scripts/setup.sh (it unpacks the clips)");
    const auto info = probe_video(path);
    entries.push_back({path, text, info.frames, info.height, info.width, info.fps});
  }
  write_clip_csv(csv, entries);
  return csv;
}

}  // namespace colossal::sora
