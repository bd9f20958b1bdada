#pragma once
// A Jinja2 template engine for chat templates: the subset transformers' templates use, with
// transformers' environment (trim_blocks, lstrip_blocks, loop controls).
//
//   statements  for (loop.index, index0, first, last, length, revindex; tuple targets; else),
//               if / elif / else, set (a name or namespace.attr), break, continue, macro (called
//               as a function), raw, comments and whitespace control ({%- -%}, {{- -}})
//   expressions literals, lists, dicts, attribute and item access, slices, calls with keywords,
//               filters, tests (is defined / none / string / number / mapping / iterable /
//               sequence / boolean / true / false / odd / even / divisibleby), in / not in,
//               comparisons, and / or / not, + - * / // % ~, conditional expressions
//   filters     trim, tojson (indent, ensure_ascii as transformers), length / count, upper, lower,
//               capitalize, title, first, last, join, default / d, string, int, float, list,
//               items, reverse, replace, round, abs, unique, selectattr / rejectattr /
//               map(attribute=) / select / reject, safe, indent, wordcount, dictsort, sum, min, max
//   methods     strings: strip, lstrip, rstrip, startswith, endswith, split, upper, lower, title,
//               capitalize, replace, find, count, format(?), join; dicts: items, keys, values, get
//   globals     raise_exception(message), strftime_now(format), range, namespace, dict, and
//               whatever the caller passes (messages, tools, bos_token, add_generation_prompt...)
// A syntax error names the template's line and column; raise_exception's message is the error.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace colossal::text {

class JinjaTemplate {
 public:
  /// Parses `source`; `name` names it in errors.
  explicit JinjaTemplate(const std::string& source, const std::string& name = "chat template");
  ~JinjaTemplate();
  JinjaTemplate(JinjaTemplate&&) noexcept;
  /// Renders with `context` (a JSON object: its members are the template's variables, in order).
  std::string render(const nlohmann::ordered_json& context) const;

  struct Node;

 private:
  std::string name_;
  std::shared_ptr<Node> root_;
};

}  // namespace colossal::text
