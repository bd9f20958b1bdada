#pragma once
// Filesystem steps library and application code take, with errors that name the path (never a
// shell: no quoting bugs, no silent failure).
//
// Written on POSIX calls rather than std::filesystem on purpose: the LibTorch wheel's libtorch.so
// exports its own copy of libstdc++'s std::filesystem, and the dynamic linker binds our calls to
// it; its remove_all crashed (a null call) on a non-empty directory here. POSIX has no such clash.
#include <string>
#include <vector>

namespace colossal::fs {

/// Creates `path` and its missing parents (like mkdir -p); throws naming the path and the reason.
void make_dirs(const std::string& path);
/// Removes `path` and everything under it if it exists (symbolic links are removed, not
/// followed); throws naming the path and the reason.
void remove_all(const std::string& path);
/// Copies a regular file (replacing `to`); throws naming both paths and the reason.
void copy_file(const std::string& from, const std::string& to);
/// Whether `path` is a directory (false when it does not exist).
bool is_directory(const std::string& path);
/// Whether `path` exists (any kind of file).
bool exists(const std::string& path);
/// The whole of a file's bytes; throws naming the path and the reason when it cannot be read.
std::string read_file(const std::string& path);
/// The names in directory `path` (not "." and ".."), sorted; empty when it does not exist.
std::vector<std::string> list_dir(const std::string& path);

}  // namespace colossal::fs
