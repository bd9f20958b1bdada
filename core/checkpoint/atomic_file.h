#pragma once
// Write-then-rename: data goes to "<path>.tmp.<pid>", is fsynced, renamed over <path>, and the
// directory entry is fsynced too. Until commit() the real path keeps its old content (or does
// not exist); an AtomicFile destroyed without commit() removes its temporary file.
#include <cstddef>
#include <string>

namespace colossal::checkpoint {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void commit();

 private:
  std::string path_;
  std::string tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

/// Writes a whole small file (JSON indexes, pointers) atomically.
void write_text_atomically(const std::string& path, const std::string& text);

}  // namespace colossal::checkpoint
