#pragma once
// A byte trie over strings with ids: every stored string that starts a text at a given offset,
// shortest first. Used for Unigram's lattice and for matching added tokens.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace colossal::text {

class ByteTrie {
 public:
  void insert(const std::string& s, int32_t id) {
    int node = 0;
    for (unsigned char c : s) {
      auto it = nodes_[static_cast<size_t>(node)].next.find(c);
      if (it == nodes_[static_cast<size_t>(node)].next.end()) {
        nodes_.push_back({});
        it = nodes_[static_cast<size_t>(node)].next.emplace(c, static_cast<int>(nodes_.size() - 1)).first;
      }
      node = it->second;
    }
    nodes_[static_cast<size_t>(node)].id = id;
  }
  bool empty() const { return nodes_.size() == 1; }
  /// fn(length, id) for each stored string that `s` holds at `from`, shortest first.
  template <class Fn>
  void prefixes(const std::string& s, size_t from, Fn&& fn) const {
    int node = 0;
    for (size_t i = from; i < s.size(); ++i) {
      const auto& next = nodes_[static_cast<size_t>(node)].next;
      auto it = next.find(static_cast<unsigned char>(s[i]));
      if (it == next.end()) return;
      node = it->second;
      if (nodes_[static_cast<size_t>(node)].id >= 0) fn(i + 1 - from, nodes_[static_cast<size_t>(node)].id);
    }
  }

 private:
  struct Node {
    std::map<unsigned char, int> next;
    int32_t id = -1;
  };
  std::vector<Node> nodes_{Node{}};
};

}  // namespace colossal::text
