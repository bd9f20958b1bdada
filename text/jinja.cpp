#include "text/jinja.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstring>
#include <map>

#include "core/common/check.h"
#include "text/jinja_value.h"
#include "text/regex.h"
#include "text/unicode.h"

namespace colossal::text {

using jinja::Args;
using jinja::Dict;
using jinja::List;
using jinja::Value;
using K = Value::Kind;

// ---------------------------------------------------------------------------------------------
// Syntax tree.

struct Expr {
  enum class Type { kLiteral, kName, kList, kDict, kAttr, kItem, kSlice, kCall, kFilter, kTest, kUnary, kBinary, kCond };
  Type type = Type::kLiteral;
  Value literal;
  std::string name;  // kName, kAttr, kFilter, kTest, operator for kUnary / kBinary
  std::vector<std::shared_ptr<Expr>> items;  // operands, list items, dict keys/values alternating, call args
  std::vector<std::pair<std::string, std::shared_ptr<Expr>>> keywords;
  bool negated = false;  // kTest: "is not"
  int line = 0, col = 0;
};
using ExprPtr = std::shared_ptr<Expr>;

struct JinjaTemplate::Node {
  enum class Type { kRoot, kText, kOutput, kFor, kIf, kSet, kBreak, kContinue, kMacro };
  Type type = Type::kRoot;
  std::string text;                      // kText; kSet: the name; kMacro: the name
  std::string attr;                      // kSet: namespace attribute
  std::vector<std::string> targets;      // kFor: loop variables; kMacro: parameters
  std::vector<ExprPtr> exprs;            // kOutput: [expr]; kFor: [iterable, filter?]; kIf: conditions; kSet: [value]; kMacro: defaults
  std::vector<std::vector<std::shared_ptr<Node>>> bodies;  // kFor: [body, else]; kIf: one per branch (+ else)
  std::vector<std::shared_ptr<Node>> children;             // kRoot
  int line = 0, col = 0;
};
using NodePtr = std::shared_ptr<JinjaTemplate::Node>;

namespace {

[[noreturn]] void syntax_error(const std::string& name, int line, int col, const std::string& what) {
  COLOSSAL_FAIL("[chat template] ", name, ": syntax error at line ", line, ", column ", col, ": ", what);
}

// ---------------------------------------------------------------------------------------------
// Lexing: the template's text, {{ }}, {% %} and {# #}, with whitespace control, trim_blocks and
// lstrip_blocks (transformers' environment).

struct Segment {
  enum class Type { kText, kExpr, kStmt } type;
  std::string body;
  int line, col;
};

std::vector<Segment> segments_of(const std::string& src, const std::string& name) {
  std::vector<Segment> out;
  size_t pos = 0;
  auto line_col = [&](size_t at) {
    int line = 1, col = 1;
    for (size_t k = 0; k < at && k < src.size(); ++k) {
      if (src[k] == '\n') ++line, col = 1;
      else ++col;
    }
    return std::make_pair(line, col);
  };
  bool strip_next = false, trim_newline = false;
  while (pos <= src.size()) {
    size_t open = src.find('{', pos);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' && src[open + 1] != '%' && src[open + 1] != '#')
      open = src.find('{', open + 1);
    if (open + 1 >= src.size()) open = std::string::npos;
    std::string text = src.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    if (trim_newline && !text.empty() && text[0] == '\n') text.erase(0, 1);
    else if (trim_newline && text.size() >= 2 && text[0] == '\r' && text[1] == '\n') text.erase(0, 2);
    if (strip_next) text.erase(0, text.find_first_not_of(" \t\r\n") == std::string::npos ? text.size() : text.find_first_not_of(" \t\r\n"));
    strip_next = trim_newline = false;
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Segment::Type::kText, text, 0, 0});
      break;
    }
    const char kind = src[open + 1];
    const bool strip_before = open + 2 < src.size() && src[open + 2] == '-';
    const bool keep_before = open + 2 < src.size() && src[open + 2] == '+';
    if (strip_before) {
      const size_t last = text.find_last_not_of(" \t\r\n");
      text.erase(last == std::string::npos ? 0 : last + 1);
    } else if ((kind == '%' || kind == '#') && !keep_before && open > 0) {
      // lstrip_blocks: the spaces and tabs between the start of its line and a block tag, when
      // nothing else (no other tag) stands there.
      const size_t nl = src.rfind('\n', open - 1);
      const size_t line_start = nl == std::string::npos ? 0 : nl + 1;
      if (line_start >= pos && src.find_first_not_of(" \t", line_start) >= open)
        text.erase(text.size() - std::min(text.size(), open - line_start));
    }
    if (!text.empty()) out.push_back({Segment::Type::kText, text, 0, 0});
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t body_start = open + 2 + ((strip_before || keep_before) ? 1 : 0);
    size_t end = src.find(close, body_start);
    // A string literal may hold the closing characters: skip over quotes in expressions.
    if (kind != '#') {
      char quote = 0;
      size_t k = body_start;
      for (; k + 1 < src.size(); ++k) {
        const char c = src[k];
        if (quote) {
          if (c == '\\') ++k;
          else if (c == quote) quote = 0;
        } else if (c == '\'' || c == '"') {
          quote = c;
        } else if (src.compare(k, 2, close) == 0) {
          break;
        }
      }
      end = k + 1 < src.size() ? k : std::string::npos;
    }
    const auto [line, col] = line_col(open);
    if (end == std::string::npos) syntax_error(name, line, col, "'" + src.substr(open, 2) + "' is never closed with '" + close + "'");
    bool strip_after = end > body_start && src[end - 1] == '-';
    std::string body = src.substr(body_start, end - body_start - (strip_after ? 1 : 0));
    if (kind == '{') out.push_back({Segment::Type::kExpr, body, line, col});
    else if (kind == '%') out.push_back({Segment::Type::kStmt, body, line, col});
    strip_next = strip_after;
    trim_newline = kind != '{' && !strip_after;  // trim_blocks
    pos = end + 2;
    if (pos > src.size()) break;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Expression tokens and parser.

struct Token {
  enum class Type { kName, kInt, kFloat, kString, kOp, kEnd } type;
  std::string text;
  int64_t i = 0;
  double f = 0;
};

class ExprParser {
 public:
  ExprParser(const std::string& src, const std::string& name, int line, int col) : name_(name), line_(line), col_(col) {
    lex(src);
  }

  ExprPtr expression() {
    auto e = or_expr();
    if (peek_name("if")) {
      next();
      auto cond = or_expr();
      auto c = node(Expr::Type::kCond);
      c->items = {cond, e};
      if (peek_name("else")) {
        next();
        c->items.push_back(expression());
      }
      return c;
    }
    return e;
  }
  bool done() const { return toks_[pos_].type == Token::Type::kEnd; }
  bool peek_name(const std::string& n) const { return toks_[pos_].type == Token::Type::kName && toks_[pos_].text == n; }
  bool peek_op(const std::string& o) const { return toks_[pos_].type == Token::Type::kOp && toks_[pos_].text == o; }
  Token next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  std::string name_token() {
    if (toks_[pos_].type != Token::Type::kName) fail("expected a name, found '" + toks_[pos_].text + "'");
    return next().text;
  }
  void expect_op(const std::string& o) {
    if (!peek_op(o)) fail("expected '" + o + "', found '" + (done() ? std::string("end of tag") : toks_[pos_].text) + "'");
    next();
  }
  void expect_name(const std::string& n) {
    if (!peek_name(n)) fail("expected '" + n + "', found '" + (done() ? std::string("end of tag") : toks_[pos_].text) + "'");
    next();
  }
  [[noreturn]] void fail(const std::string& what) const { syntax_error(name_, line_, col_, what); }
  ExprPtr or_expr() {
    auto l = and_expr();
    while (peek_name("or")) {
      next();
      l = binary("or", l, and_expr());
    }
    return l;
  }

 private:
  void lex(const std::string& s) {
    size_t k = 0;
    while (k < s.size()) {
      const char c = s[k];
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++k;
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = k;
        while (e < s.size() && (std::isalnum(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
        toks_.push_back({Token::Type::kName, s.substr(k, e - k)});
        k = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t e = k;
        while (e < s.size() && (std::isdigit(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
        if (e + 1 < s.size() && s[e] == '.' && std::isdigit(static_cast<unsigned char>(s[e + 1]))) {
          ++e;
          while (e < s.size() && std::isdigit(static_cast<unsigned char>(s[e]))) ++e;
          Token t{Token::Type::kFloat, s.substr(k, e - k)};
          t.f = std::stod(t.text);
          toks_.push_back(t);
        } else {
          Token t{Token::Type::kInt, s.substr(k, e - k)};
          std::string digits;
          for (char d : t.text)
            if (d != '_') digits += d;
          t.i = std::stoll(digits);
          toks_.push_back(t);
        }
        k = e;
      } else if (c == '\'' || c == '"') {
        std::string v;
        size_t e = k + 1;
        for (; e < s.size() && s[e] != c; ++e) {
          if (s[e] == '\\' && e + 1 < s.size()) {
            const char n = s[++e];
            v += n == 'n' ? '\n' : n == 't' ? '\t' : n == 'r' ? '\r' : n;
          } else {
            v += s[e];
          }
        }
        if (e >= s.size()) fail("a string is never closed");
        toks_.push_back({Token::Type::kString, v});
        k = e + 1;
      } else {
        static const char* ops[] = {"==", "!=", "<=", ">=", "//", "**", "<", ">", "+", "-", "*", "/", "%", "~", "(", ")",
                                    "[", "]", "{", "}", ",", ":", ".", "|", "="};
        bool found = false;
        for (const char* o : ops)
          if (s.compare(k, std::strlen(o), o) == 0) {
            toks_.push_back({Token::Type::kOp, o});
            k += std::strlen(o);
            found = true;
            break;
          }
        if (!found) fail(std::string("unexpected character '") + c + "'");
      }
    }
    toks_.push_back({Token::Type::kEnd, ""});
  }

  ExprPtr node(Expr::Type t) {
    auto e = std::make_shared<Expr>();
    e->type = t;
    e->line = line_;
    e->col = col_;
    return e;
  }
  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r) {
    auto e = node(Expr::Type::kBinary);
    e->name = op;
    e->items = {std::move(l), std::move(r)};
    return e;
  }
  ExprPtr and_expr() {
    auto l = not_expr();
    while (peek_name("and")) {
      next();
      l = binary("and", l, not_expr());
    }
    return l;
  }
  ExprPtr not_expr() {
    if (peek_name("not")) {
      next();
      auto e = node(Expr::Type::kUnary);
      e->name = "not";
      e->items = {not_expr()};
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    auto l = concat();
    while (true) {
      std::string op;
      if (peek_op("==") || peek_op("!=") || peek_op("<") || peek_op(">") || peek_op("<=") || peek_op(">=")) {
        op = next().text;
      } else if (peek_name("in")) {
        next();
        op = "in";
      } else if (peek_name("not") && pos_ + 1 < toks_.size() && toks_[pos_ + 1].type == Token::Type::kName && toks_[pos_ + 1].text == "in") {
        next();
        next();
        op = "not in";
      } else {
        return l;
      }
      l = binary(op, l, concat());
    }
  }
  ExprPtr concat() {
    auto l = add();
    while (peek_op("~")) {
      next();
      l = binary("~", l, add());
    }
    return l;
  }
  ExprPtr add() {
    auto l = mul();
    while (peek_op("+") || peek_op("-")) {
      const auto op = next().text;
      l = binary(op, l, mul());
    }
    return l;
  }
  ExprPtr mul() {
    auto l = power();
    while (peek_op("*") || peek_op("/") || peek_op("//") || peek_op("%")) {
      const auto op = next().text;
      l = binary(op, l, power());
    }
    return l;
  }
  ExprPtr power() {
    auto l = unary();
    while (peek_op("**")) {
      next();
      l = binary("**", l, unary());
    }
    return l;
  }
  ExprPtr unary() {
    if (peek_op("-") || peek_op("+")) {
      const auto op = next().text;
      auto e = node(Expr::Type::kUnary);
      e->name = op;
      e->items = {unary()};
      return e;
    }
    return filters(postfix(primary()));
  }
  void call_args(const ExprPtr& e) {
    expect_op("(");
    while (!peek_op(")")) {
      if (toks_[pos_].type == Token::Type::kName && pos_ + 1 < toks_.size() && toks_[pos_ + 1].type == Token::Type::kOp &&
          toks_[pos_ + 1].text == "=") {
        const std::string k = next().text;
        next();
        e->keywords.emplace_back(k, expression());
      } else {
        e->items.push_back(expression());
      }
      if (!peek_op(")")) expect_op(",");
    }
    expect_op(")");
  }
  ExprPtr filters(ExprPtr e) {
    while (true) {
      if (peek_op("|")) {
        next();
        auto f = node(Expr::Type::kFilter);
        f->name = name_token();
        f->items = {e};
        if (peek_op("(")) call_args(f);
        e = f;
      } else if (peek_name("is")) {
        next();
        auto t = node(Expr::Type::kTest);
        if (peek_name("not")) {
          next();
          t->negated = true;
        }
        t->name = name_token();
        t->items = {e};
        if (peek_op("(")) call_args(t);
        else if (!done() && (toks_[pos_].type == Token::Type::kInt || toks_[pos_].type == Token::Type::kString))
          t->items.push_back(primary());  // "is divisibleby 3", "is sameas x"
        e = t;
      } else {
        return e;
      }
    }
  }
  ExprPtr postfix(ExprPtr e) {
    while (true) {
      if (peek_op(".")) {
        next();
        auto a = node(Expr::Type::kAttr);
        a->name = name_token();
        a->items = {e};
        e = a;
      } else if (peek_op("[")) {
        next();
        ExprPtr lo, hi, step;
        bool slice = false;
        if (!peek_op(":")) lo = expression();
        if (peek_op(":")) {
          slice = true;
          next();
          if (!peek_op("]") && !peek_op(":")) hi = expression();
          if (peek_op(":")) {
            next();
            if (!peek_op("]")) step = expression();
          }
        }
        expect_op("]");
        auto s = node(slice ? Expr::Type::kSlice : Expr::Type::kItem);
        s->items = {e, lo, hi, step};
        e = s;
      } else if (peek_op("(")) {
        auto c = node(Expr::Type::kCall);
        c->items = {e};
        call_args(c);
        e = c;
      } else {
        return e;
      }
    }
  }
  ExprPtr primary() {
    const Token t = next();
    switch (t.type) {
      case Token::Type::kInt: { auto e = node(Expr::Type::kLiteral); e->literal = Value::integer(t.i); return e; }
      case Token::Type::kFloat: { auto e = node(Expr::Type::kLiteral); e->literal = Value::number(t.f); return e; }
      case Token::Type::kString: {
        std::string s = t.text;
        while (toks_[pos_].type == Token::Type::kString) s += next().text;  // adjacent literals join
        auto e = node(Expr::Type::kLiteral);
        e->literal = Value::string(s);
        return e;
      }
      case Token::Type::kName: {
        auto e = node(Expr::Type::kLiteral);
        if (t.text == "true" || t.text == "True") e->literal = Value::boolean(true);
        else if (t.text == "false" || t.text == "False") e->literal = Value::boolean(false);
        else if (t.text == "none" || t.text == "None") e->literal = Value::none();
        else {
          e->type = Expr::Type::kName;
          e->name = t.text;
        }
        return e;
      }
      case Token::Type::kOp:
        if (t.text == "(") {
          auto e = expression();
          if (peek_op(",")) {  // a tuple: a list
            auto l = node(Expr::Type::kList);
            l->items.push_back(e);
            while (peek_op(",")) {
              next();
              if (peek_op(")")) break;
              l->items.push_back(expression());
            }
            e = l;
          }
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          auto l = node(Expr::Type::kList);
          while (!peek_op("]")) {
            l->items.push_back(expression());
            if (!peek_op("]")) expect_op(",");
          }
          expect_op("]");
          return l;
        }
        if (t.text == "{") {
          auto d = node(Expr::Type::kDict);
          while (!peek_op("}")) {
            d->items.push_back(expression());
            expect_op(":");
            d->items.push_back(expression());
            if (!peek_op("}")) expect_op(",");
          }
          expect_op("}");
          return d;
        }
        break;
      case Token::Type::kEnd: fail("an expression ends too early");
    }
    fail("unexpected '" + t.text + "'");
    return nullptr;
  }

  std::string name_;
  int line_, col_;
  std::vector<Token> toks_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Statements into a tree.

class TreeBuilder {
 public:
  TreeBuilder(std::vector<Segment> segs, std::string name) : segs_(std::move(segs)), name_(std::move(name)) {}

  NodePtr build() {
    auto root = std::make_shared<JinjaTemplate::Node>();
    std::string end;
    root->children = block({}, &end);
    if (!end.empty()) syntax_error(name_, last_line_, last_col_, "unexpected '" + end + "'");
    return root;
  }

 private:
  // Nodes until one of `enders` (its keyword returned in *ended, its parser left in ender_).
  std::vector<NodePtr> block(const std::vector<std::string>& enders, std::string* ended) {
    std::vector<NodePtr> out;
    while (pos_ < segs_.size()) {
      const Segment& s = segs_[pos_++];
      last_line_ = s.line;
      last_col_ = s.col;
      if (s.type == Segment::Type::kText) {
        auto n = std::make_shared<JinjaTemplate::Node>();
        n->type = JinjaTemplate::Node::Type::kText;
        n->text = s.body;
        out.push_back(n);
        continue;
      }
      auto p = std::make_shared<ExprParser>(s.body, name_, s.line, s.col);
      if (s.type == Segment::Type::kExpr) {
        auto n = node(JinjaTemplate::Node::Type::kOutput, s);
        n->exprs = {p->expression()};
        if (!p->done()) p->fail("unexpected text after the expression");
        out.push_back(n);
        continue;
      }
      const std::string kw = p->name_token();
      if (std::find(enders.begin(), enders.end(), kw) != enders.end()) {
        if (kw != "elif" && !p->done()) p->fail("unexpected text at the end of the tag");
        *ended = kw;
        ender_ = p;
        return out;
      }
      if (kw == "for") {
        auto n = node(JinjaTemplate::Node::Type::kFor, s);
        n->targets.push_back(p->name_token());
        while (p->peek_op(",")) {
          p->next();
          n->targets.push_back(p->name_token());
        }
        p->expect_name("in");
        n->exprs.push_back(p->or_expr());
        if (p->peek_name("if")) {
          p->next();
          n->exprs.push_back(p->expression());
        }
        if (p->peek_name("recursive")) p->fail("recursive loops are not supported");
        if (!p->done()) p->fail("unexpected text at the end of the tag");
        std::string end;
        n->bodies.push_back(block({"else", "endfor"}, &end));
        if (end == "else") n->bodies.push_back(block({"endfor"}, &end));
        if (end != "endfor") syntax_error(name_, s.line, s.col, "this 'for' has no 'endfor'");
        out.push_back(n);
      } else if (kw == "if") {
        auto n = node(JinjaTemplate::Node::Type::kIf, s);
        n->exprs.push_back(p->expression());
        if (!p->done()) p->fail("unexpected text at the end of the tag");
        std::string end;
        n->bodies.push_back(block({"elif", "else", "endif"}, &end));
        while (end == "elif") {
          n->exprs.push_back(ender_->expression());
          if (!ender_->done()) ender_->fail("unexpected text at the end of the tag");
          n->bodies.push_back(block({"elif", "else", "endif"}, &end));
        }
        if (end == "else") n->bodies.push_back(block({"endif"}, &end));
        if (end != "endif") syntax_error(name_, s.line, s.col, "this 'if' has no 'endif'");
        out.push_back(n);
      } else if (kw == "set") {
        auto n = node(JinjaTemplate::Node::Type::kSet, s);
        n->text = p->name_token();
        if (p->peek_op(".")) {
          p->next();
          n->attr = p->name_token();
        }
        if (!p->peek_op("=")) p->fail("block assignments ({% set x %}...{% endset %}) are not supported");
        p->expect_op("=");
        n->exprs = {p->expression()};
        out.push_back(n);
      } else if (kw == "break" || kw == "continue") {
        out.push_back(node(kw == "break" ? JinjaTemplate::Node::Type::kBreak : JinjaTemplate::Node::Type::kContinue, s));
      } else if (kw == "macro") {
        auto n = node(JinjaTemplate::Node::Type::kMacro, s);
        n->text = p->name_token();
        p->expect_op("(");
        while (!p->peek_op(")")) {
          n->targets.push_back(p->name_token());
          if (p->peek_op("=")) {
            p->next();
            n->exprs.push_back(p->expression());
          } else {
            n->exprs.push_back(nullptr);
          }
          if (!p->peek_op(")")) p->expect_op(",");
        }
        p->expect_op(")");
        if (!p->done()) p->fail("unexpected text at the end of the tag");
        std::string end;
        n->bodies.push_back(block({"endmacro"}, &end));
        if (end != "endmacro") syntax_error(name_, s.line, s.col, "this 'macro' has no 'endmacro'");
        out.push_back(n);
      } else if (kw == "generation" || kw == "endgeneration") {
        // transformers' marker of assistant text (for masks): renders as its content.
      } else {
        syntax_error(name_, s.line, s.col, "unknown or unexpected tag '" + kw + "'");
      }
      if ((kw == "set" || kw == "break" || kw == "continue") && !p->done()) p->fail("unexpected text at the end of the tag");
    }
    return out;
  }

  NodePtr node(JinjaTemplate::Node::Type t, const Segment& s) {
    auto n = std::make_shared<JinjaTemplate::Node>();
    n->type = t;
    n->line = s.line;
    n->col = s.col;
    return n;
  }

  std::vector<Segment> segs_;
  std::string name_;
  size_t pos_ = 0;
  std::shared_ptr<ExprParser> ender_;
  int last_line_ = 0, last_col_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Evaluation.

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const std::string& name, const nlohmann::ordered_json& context) : name_(name) {
    scopes_.emplace_back();
    auto& g = scopes_.back();
    for (auto it = context.begin(); it != context.end(); ++it) g[it.key()] = Value::from_json(it.value());
    install_globals(g);
  }

  Flow run(const std::vector<NodePtr>& nodes, std::string& out) {
    for (const auto& n : nodes) {
      switch (n->type) {
        case JinjaTemplate::Node::Type::kText: out += n->text; break;
        case JinjaTemplate::Node::Type::kOutput: out += eval(*n->exprs[0]).str(); break;
        case JinjaTemplate::Node::Type::kIf: {
          size_t k = 0;
          for (; k < n->exprs.size(); ++k)
            if (eval(*n->exprs[k]).truthy()) break;
          if (k < n->bodies.size()) {
            const Flow f = run(n->bodies[k], out);
            if (f != Flow::kNormal) return f;
          }
          break;
        }
        case JinjaTemplate::Node::Type::kFor: run_for(*n, out); break;
        case JinjaTemplate::Node::Type::kSet: {
          Value v = eval(*n->exprs[0]);
          if (n->attr.empty()) {
            scopes_.back()[n->text] = v;
          } else {
            Value ns = lookup(n->text);
            if (ns.kind != K::kNamespace) fail(n->line, n->col, "'" + n->text + "' is not a namespace (set " + n->text + "." + n->attr + ")");
            bool found = false;
            for (auto& [k, old] : *ns.dict)
              if (k == n->attr) old = v, found = true;
            if (!found) ns.dict->emplace_back(n->attr, v);
          }
          break;
        }
        case JinjaTemplate::Node::Type::kBreak: return Flow::kBreak;
        case JinjaTemplate::Node::Type::kContinue: return Flow::kContinue;
        case JinjaTemplate::Node::Type::kMacro: define_macro(n); break;
        case JinjaTemplate::Node::Type::kRoot: run(n->children, out); break;
      }
    }
    return Flow::kNormal;
  }

 private:
  [[noreturn]] void fail(int line, int col, const std::string& what) const {
    COLOSSAL_FAIL("[chat template] ", name_, ": line ", line, ", column ", col, ": ", what);
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Value();
  }

  void run_for(const JinjaTemplate::Node& n, std::string& out) {
    Value seq = eval(*n.exprs[0]);
    List items;
    if (seq.kind == K::kList) items = *seq.list;
    else if (seq.is_mapping()) for (const auto& [k, v] : *seq.dict) items.push_back(Value::string(k));
    else if (seq.kind == K::kString) for (const auto& c : code_points(seq.s)) { std::string s; append_utf8(s, c); items.push_back(Value::string(s)); }
    else if (seq.defined() && seq.kind != K::kNone) fail(n.line, n.col, "cannot loop over a " + seq.type_name());
    scopes_.emplace_back();
    if (n.exprs.size() > 1) {  // for x in xs if cond: the filtered list (loop.* counts it)
      List kept;
      for (const auto& item : items) {
        bind(n, item);
        if (eval(*n.exprs[1]).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < len; ++k) {
      bind(n, items[static_cast<size_t>(k)]);
      Dict loop = {{"index", Value::integer(k + 1)}, {"index0", Value::integer(k)}, {"first", Value::boolean(k == 0)},
                   {"last", Value::boolean(k == len - 1)}, {"length", Value::integer(len)},
                   {"revindex", Value::integer(len - k)}, {"revindex0", Value::integer(len - k - 1)},
                   {"previtem", k > 0 ? items[static_cast<size_t>(k - 1)] : Value()},
                   {"nextitem", k + 1 < len ? items[static_cast<size_t>(k + 1)] : Value()}};
      scopes_.back()["loop"] = Value::of_dict(std::move(loop));
      if (run(n.bodies[0], out) == Flow::kBreak) break;
    }
    scopes_.pop_back();
    if (len == 0 && n.bodies.size() > 1) run(n.bodies[1], out);
  }

  void bind(const JinjaTemplate::Node& n, const Value& item) {
    auto& scope = scopes_.back();
    if (n.targets.size() == 1) {
      scope[n.targets[0]] = item;
      return;
    }
    if (item.kind != K::kList || item.list->size() != n.targets.size())
      fail(n.line, n.col, "cannot unpack a " + item.type_name() + " into " + std::to_string(n.targets.size()) + " names");
    for (size_t k = 0; k < n.targets.size(); ++k) scope[n.targets[k]] = (*item.list)[k];
  }

  void define_macro(const NodePtr& n) {
    auto self = this;
    scopes_.back()[n->text] = Value::function([self, n](Args& a) {
      self->scopes_.emplace_back();
      for (size_t k = 0; k < n->targets.size(); ++k) {
        Value v;
        if (k < a.positional.size()) v = a.positional[k];
        else if (const Value* kw = a.keyword(n->targets[k])) v = *kw;
        else if (n->exprs[k]) v = self->eval(*n->exprs[k]);
        self->scopes_.back()[n->targets[k]] = v;
      }
      std::string out;
      self->run(n->bodies[0], out);
      self->scopes_.pop_back();
      return Value::string(out);
    });
  }

  Value eval(const Expr& e) {
    switch (e.type) {
      case Expr::Type::kLiteral: return e.literal;
      case Expr::Type::kName: return lookup(e.name);
      case Expr::Type::kList: {
        List l;
        for (const auto& i : e.items) l.push_back(eval(*i));
        return Value::of_list(std::move(l));
      }
      case Expr::Type::kDict: {
        Dict d;
        for (size_t k = 0; k + 1 < e.items.size(); k += 2) {
          Value key = eval(*e.items[k]);
          d.emplace_back(key.str(), eval(*e.items[k + 1]));
        }
        return Value::of_dict(std::move(d));
      }
      case Expr::Type::kAttr: return attribute(eval(*e.items[0]), e.name);
      case Expr::Type::kItem: return item(eval(*e.items[0]), eval(*e.items[1]), e);
      case Expr::Type::kSlice: return slice(e);
      case Expr::Type::kCall: return call(e);
      case Expr::Type::kFilter: return filter(e);
      case Expr::Type::kTest: {
        const bool r = test(e);
        return Value::boolean(e.negated ? !r : r);
      }
      case Expr::Type::kUnary: {
        Value v = eval(*e.items[0]);
        if (e.name == "not") return Value::boolean(!v.truthy());
        if (v.kind == K::kInt) return Value::integer(e.name == "-" ? -v.i : v.i);
        if (v.kind == K::kFloat) return Value::number(e.name == "-" ? -v.f : v.f);
        fail(e.line, e.col, "unary " + e.name + " on a " + v.type_name());
      }
      case Expr::Type::kBinary: return binary(e);
      case Expr::Type::kCond: {
        if (eval(*e.items[0]).truthy()) return eval(*e.items[1]);
        return e.items.size() > 2 ? eval(*e.items[2]) : Value();
      }
    }
    return Value();
  }

  Value attribute(const Value& v, const std::string& name) {
    if (v.is_mapping()) {
      if (const Value* m = v.member(name)) return *m;
      if (v.kind == K::kDict) {
        if (name == "items" || name == "keys" || name == "values" || name == "get") return method(v, name);
      }
      return Value();
    }
    if (v.kind == K::kString || v.kind == K::kList) return method(v, name);
    return Value();
  }

  Value item(const Value& v, const Value& key, const Expr& e) {
    if (v.kind == K::kList && key.kind == K::kInt) {
      int64_t k = key.i < 0 ? key.i + static_cast<int64_t>(v.list->size()) : key.i;
      if (k < 0 || k >= static_cast<int64_t>(v.list->size())) return Value();
      return (*v.list)[static_cast<size_t>(k)];
    }
    if (v.kind == K::kString && key.kind == K::kInt) {
      auto cps = code_points(v.s);
      int64_t k = key.i < 0 ? key.i + static_cast<int64_t>(cps.size()) : key.i;
      if (k < 0 || k >= static_cast<int64_t>(cps.size())) return Value();
      std::string s;
      append_utf8(s, cps[static_cast<size_t>(k)]);
      return Value::string(s);
    }
    if (v.is_mapping()) {
      const Value* m = v.member(key.str());
      return m ? *m : Value();
    }
    if (!v.defined()) return Value();
    (void)e;
    return Value();
  }

  Value slice(const Expr& e) {
    Value v = eval(*e.items[0]);
    auto opt = [&](const ExprPtr& x) -> std::optional<int64_t> {
      if (!x) return std::nullopt;
      Value r = eval(*x);
      if (r.kind != K::kInt) return std::nullopt;
      return r.i;
    };
    const auto lo = opt(e.items[1]), hi = opt(e.items[2]), st = opt(e.items[3]);
    const int64_t step = st.value_or(1);
    if (step == 0) fail(e.line, e.col, "slice step cannot be zero");
    List src;
    std::vector<char32_t> cps;
    const bool str = v.kind == K::kString;
    if (str) cps = code_points(v.s);
    else if (v.kind == K::kList) src = *v.list;
    else return Value();
    const int64_t n = str ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(src.size());
    auto clamp = [&](std::optional<int64_t> x, int64_t def) {
      if (!x) return def;
      int64_t k = *x < 0 ? *x + n : *x;
      return step > 0 ? std::clamp<int64_t>(k, 0, n) : std::clamp<int64_t>(k, -1, n - 1);
    };
    const int64_t b = clamp(lo, step > 0 ? 0 : n - 1), en = clamp(hi, step > 0 ? n : -1);
    List out;
    std::string s;
    for (int64_t k = b; step > 0 ? k < en : k > en; k += step) {
      if (str) append_utf8(s, cps[static_cast<size_t>(k)]);
      else out.push_back(src[static_cast<size_t>(k)]);
    }
    return str ? Value::string(s) : Value::of_list(std::move(out));
  }

  Args args_of(const Expr& e, size_t skip) {
    Args a;
    for (size_t k = skip; k < e.items.size(); ++k) a.positional.push_back(eval(*e.items[k]));
    for (const auto& [k, v] : e.keywords) a.keywords.emplace_back(k, eval(*v));
    return a;
  }

  Value call(const Expr& e) {
    Value f = eval(*e.items[0]);
    Args a = args_of(e, 1);
    if (f.kind != K::kFunction) {
      std::string what = e.items[0]->type == Expr::Type::kName ? e.items[0]->name
                         : e.items[0]->type == Expr::Type::kAttr ? e.items[0]->name : "the value";
      fail(e.line, e.col, "'" + what + "' is not a function (or not supported here)");
    }
    return (*f.fn)(a);
  }

  Value method(const Value& self, const std::string& name);
  Value filter(const Expr& e);
  bool test(const Expr& e);
  Value binary(const Expr& e);
  void install_globals(std::map<std::string, Value>& g);

  std::string name_;
  std::vector<std::map<std::string, Value>> scopes_;
};

std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
  size_t b = 0, e = s.size();
  auto is_strip = [&](size_t at) {
    if (!chars.empty()) return chars.find(s[at]) != std::string::npos;
    return is_whitespace(decode_utf8(s, at).first);
  };
  if (left)
    while (b < e && is_strip(b)) b += chars.empty() ? static_cast<size_t>(decode_utf8(s, b).second) : 1;
  if (right)
    while (e > b) {
      size_t p = e - 1;
      while (chars.empty() && p > b && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
      if (!is_strip(p)) break;
      e = p;
    }
  return s.substr(b, e - b);
}

std::string title_case(const std::string& s) {
  std::string out;
  bool start = true;
  for (size_t i = 0; i < s.size();) {
    auto [c, n] = decode_utf8(s, i);
    const std::string ch = s.substr(i, static_cast<size_t>(n));
    out += start ? std::string(1, static_cast<char>(std::toupper(static_cast<unsigned char>(ch[0])))) + ch.substr(1) : lowercase(ch);
    start = !is_alphanumeric(c);
    i += n;
  }
  return out;
}

std::string upper(const std::string& s) {
  std::string out = s;
  for (auto& ch : out) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return out;
}

Value Renderer::method(const Value& self, const std::string& name) {
  Value s = self;
  return Value::function([s, name, this](Args& a) -> Value {
    auto arg = [&](size_t k) -> Value { return k < a.positional.size() ? a.positional[k] : Value(); };
    if (s.kind == K::kString) {
      if (name == "strip" || name == "lstrip" || name == "rstrip")
        return Value::string(strip_chars(s.s, arg(0).defined() && arg(0).kind != K::kNone ? arg(0).s : "", name != "rstrip", name != "lstrip"));
      if (name == "startswith" || name == "endswith") {
        std::vector<std::string> options;
        if (arg(0).kind == K::kList) for (const auto& o : *arg(0).list) options.push_back(o.s);
        else options.push_back(arg(0).s);
        for (const auto& o : options)
          if (name == "startswith" ? s.s.compare(0, o.size(), o) == 0
                                   : s.s.size() >= o.size() && s.s.compare(s.s.size() - o.size(), o.size(), o) == 0)
            return Value::boolean(true);
        return Value::boolean(false);
      }
      if (name == "upper") return Value::string(upper(s.s));
      if (name == "lower") return Value::string(lowercase(s.s));
      if (name == "title") return Value::string(title_case(s.s));
      if (name == "capitalize") return Value::string(s.s.empty() ? s.s : upper(s.s.substr(0, 1)) + lowercase(s.s.substr(1)));
      if (name == "replace") return Value::string(replace_literal(s.s, arg(0).s, arg(1).s, arg(2).kind == K::kInt ? arg(2).i : -1));
      if (name == "find") { auto k = s.s.find(arg(0).s); return Value::integer(k == std::string::npos ? -1 : static_cast<int64_t>(k)); }
      if (name == "count") {
        int64_t n = 0;
        for (size_t k = s.s.find(arg(0).s); !arg(0).s.empty() && k != std::string::npos; k = s.s.find(arg(0).s, k + arg(0).s.size())) ++n;
        return Value::integer(n);
      }
      if (name == "split") {
        List out;
        if (!arg(0).defined() || arg(0).kind == K::kNone) {
          size_t i = 0;
          while (i < s.s.size()) {
            while (i < s.s.size() && is_whitespace(decode_utf8(s.s, i).first)) i += static_cast<size_t>(decode_utf8(s.s, i).second);
            size_t j = i;
            while (j < s.s.size() && !is_whitespace(decode_utf8(s.s, j).first)) j += static_cast<size_t>(decode_utf8(s.s, j).second);
            if (j > i) out.push_back(Value::string(s.s.substr(i, j - i)));
            i = j;
          }
        } else {
          const std::string sep = arg(0).s;
          size_t prev = 0;
          for (size_t k = s.s.find(sep); !sep.empty() && k != std::string::npos; k = s.s.find(sep, prev)) {
            out.push_back(Value::string(s.s.substr(prev, k - prev)));
            prev = k + sep.size();
          }
          out.push_back(Value::string(s.s.substr(prev)));
        }
        return Value::of_list(std::move(out));
      }
      if (name == "join") {
        std::string out;
        if (arg(0).kind == K::kList)
          for (size_t k = 0; k < arg(0).list->size(); ++k) out += (k ? s.s : "") + (*arg(0).list)[k].str();
        return Value::string(out);
      }
    }
    if (s.kind == K::kDict) {
      if (name == "items") {
        List out;
        for (const auto& [k, v] : *s.dict) out.push_back(Value::of_list({Value::string(k), v}));
        return Value::of_list(std::move(out));
      }
      if (name == "keys") { List out; for (const auto& [k, v] : *s.dict) out.push_back(Value::string(k)); return Value::of_list(std::move(out)); }
      if (name == "values") { List out; for (const auto& [k, v] : *s.dict) out.push_back(v); return Value::of_list(std::move(out)); }
      if (name == "get") {
        const Value* m = s.member(arg(0).str());
        return m ? *m : (a.positional.size() > 1 ? arg(1) : Value::none());
      }
    }
    COLOSSAL_FAIL("[chat template] ", name_, ": a ", s.type_name(), " has no method '", name, "'");
  });
}

Value Renderer::filter(const Expr& e) {
  Value v = eval(*e.items[0]);
  Args a = args_of(e, 1);
  auto arg = [&](size_t k, const char* kw) -> Value {
    if (k < a.positional.size()) return a.positional[k];
    if (const Value* x = a.keyword(kw)) return *x;
    return Value();
  };
  const std::string& f = e.name;
  if (f == "trim") return Value::string(strip_chars(v.str(), arg(0, "chars").defined() ? arg(0, "chars").s : "", true, true));
  if (f == "tojson") {
    const Value indent = arg(0, "indent");
    const Value ascii = a.keyword("ensure_ascii") ? *a.keyword("ensure_ascii") : Value::boolean(false);
    const Value sort = a.keyword("sort_keys") ? *a.keyword("sort_keys") : Value::boolean(false);
    return Value::string(v.dumps(ascii.truthy(), indent.kind == K::kInt ? static_cast<int>(indent.i) : -1, sort.truthy()));
  }
  if (f == "length" || f == "count") {
    if (v.kind == K::kString) return Value::integer(static_cast<int64_t>(code_points(v.s).size()));
    if (v.kind == K::kList) return Value::integer(static_cast<int64_t>(v.list->size()));
    if (v.is_mapping()) return Value::integer(static_cast<int64_t>(v.dict->size()));
    if (!v.defined()) return Value::integer(0);  // an undefined value is empty
    static const std::map<K, std::string> python_type = {{K::kNone, "NoneType"}, {K::kBool, "bool"}, {K::kInt, "int"}, {K::kFloat, "float"}};
    fail(e.line, e.col, "object of type '" + (python_type.count(v.kind) ? python_type.at(v.kind) : v.type_name()) + "' has no len()");
  }
  if (f == "upper") return Value::string(upper(v.str()));
  if (f == "lower") return Value::string(lowercase(v.str()));
  if (f == "capitalize") { std::string s = v.str(); return Value::string(s.empty() ? s : upper(s.substr(0, 1)) + lowercase(s.substr(1))); }
  if (f == "title") return Value::string(title_case(v.str()));
  if (f == "string") return Value::string(v.str());
  if (f == "safe" || f == "e" || f == "escape") return v;
  if (f == "int") {
    if (v.kind == K::kInt) return v;
    if (v.kind == K::kFloat) return Value::integer(static_cast<int64_t>(v.f));
    if (v.kind == K::kString) try { return Value::integer(std::stoll(v.s)); } catch (...) { return Value::integer(0); }
    return Value::integer(v.kind == K::kBool ? v.b : 0);
  }
  if (f == "float") {
    if (v.is_number()) return Value::number(v.as_double());
    if (v.kind == K::kString) try { return Value::number(std::stod(v.s)); } catch (...) { return Value::number(0); }
    return Value::number(0);
  }
  if (f == "abs") return v.kind == K::kInt ? Value::integer(std::llabs(v.i)) : Value::number(std::fabs(v.as_double()));
  if (f == "round") {
    const int64_t digits = arg(0, "precision").kind == K::kInt ? arg(0, "precision").i : 0;
    const double p = std::pow(10.0, static_cast<double>(digits));
    return Value::number(std::nearbyint(v.as_double() * p) / p);
  }
  if (f == "default" || f == "d") {
    const bool boolean = arg(1, "boolean").truthy();
    if (!v.defined() || (boolean && !v.truthy())) return a.positional.empty() ? Value::string("") : a.positional[0];
    return v;
  }
  if (f == "first" || f == "last") {
    if (v.kind == K::kList) return v.list->empty() ? Value() : (f == "first" ? v.list->front() : v.list->back());
    if (v.kind == K::kString) {
      auto cps = code_points(v.s);
      if (cps.empty()) return Value();
      std::string s;
      append_utf8(s, f == "first" ? cps.front() : cps.back());
      return Value::string(s);
    }
    return Value();
  }
  if (f == "join") {
    const std::string sep = arg(0, "d").defined() ? arg(0, "d").str() : "";
    const Value attr = arg(1, "attribute");
    std::string out;
    if (v.kind == K::kList)
      for (size_t k = 0; k < v.list->size(); ++k) {
        const Value& x = (*v.list)[k];
        out += (k ? sep : "") + (attr.defined() ? attribute(x, attr.str()).str() : x.str());
      }
    return Value::string(out);
  }
  if (f == "list") {
    if (v.kind == K::kList) return v;
    if (v.kind == K::kString) { List l; for (auto c : code_points(v.s)) { std::string s; append_utf8(s, c); l.push_back(Value::string(s)); } return Value::of_list(l); }
    if (v.is_mapping()) { List l; for (const auto& [k, x] : *v.dict) l.push_back(Value::string(k)); return Value::of_list(l); }
    return Value::of_list({});
  }
  if (f == "items") {
    List out;
    if (v.is_mapping()) for (const auto& [k, x] : *v.dict) out.push_back(Value::of_list({Value::string(k), x}));
    return Value::of_list(std::move(out));
  }
  if (f == "dictsort") {
    List out;
    if (v.is_mapping()) for (const auto& [k, x] : *v.dict) out.push_back(Value::of_list({Value::string(k), x}));
    std::stable_sort(out.begin(), out.end(), [](const Value& x, const Value& y) { return (*x.list)[0].s < (*y.list)[0].s; });
    return Value::of_list(std::move(out));
  }
  if (f == "reverse") {
    if (v.kind == K::kString) { auto c = code_points(v.s); std::string s; for (auto it = c.rbegin(); it != c.rend(); ++it) append_utf8(s, *it); return Value::string(s); }
    if (v.kind == K::kList) { List l(v.list->rbegin(), v.list->rend()); return Value::of_list(std::move(l)); }
    return v;
  }
  if (f == "replace") return Value::string(replace_literal(v.str(), arg(0, "old").str(), arg(1, "new").str(), arg(2, "count").kind == K::kInt ? arg(2, "count").i : -1));
  if (f == "unique") {
    List out;
    if (v.kind == K::kList)
      for (const auto& x : *v.list)
        if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return jinja::equal(x, y); })) out.push_back(x);
    return Value::of_list(std::move(out));
  }
  if (f == "sum" || f == "min" || f == "max") {
    if (v.kind != K::kList || v.list->empty()) return f == "sum" ? Value::integer(0) : Value();
    if (f == "sum") {
      bool fl = false;
      double s = 0;
      for (const auto& x : *v.list) s += x.as_double(), fl = fl || x.kind == K::kFloat;
      return fl ? Value::number(s) : Value::integer(static_cast<int64_t>(s));
    }
    Value best = v.list->front();
    for (const auto& x : *v.list)
      if (f == "min" ? jinja::less(x, best) : jinja::less(best, x)) best = x;
    return best;
  }
  if (f == "indent") {
    const int64_t width = arg(0, "width").kind == K::kInt ? arg(0, "width").i : 4;
    const bool first = arg(1, "first").truthy();
    const std::string pad(static_cast<size_t>(width), ' ');
    std::string s = v.str(), out;
    size_t prev = 0;
    bool at_first = true;
    while (true) {
      const size_t nl = s.find('\n', prev);
      std::string line = s.substr(prev, nl == std::string::npos ? std::string::npos : nl - prev);
      if ((!at_first || first) && !line.empty()) out += pad;
      out += line;
      if (nl == std::string::npos) break;
      out += '\n';
      prev = nl + 1;
      at_first = false;
    }
    return Value::string(out);
  }
  if (f == "wordcount") {
    int64_t n = 0;
    bool in = false;
    for (auto c : code_points(v.str())) {
      const bool w = is_alphanumeric(c) || c == '_';
      if (w && !in) ++n;
      in = w;
    }
    return Value::integer(n);
  }
  if (f == "selectattr" || f == "rejectattr" || f == "select" || f == "reject" || f == "map") {
    List out;
    if (v.kind != K::kList) return Value::of_list({});
    const bool attr_based = f == "selectattr" || f == "rejectattr";
    for (const auto& x : *v.list) {
      if (f == "map") {
        if (const Value* at = a.keyword("attribute")) {
          Value r = attribute(x, at->str());
          if (!r.defined()) if (const Value* d = a.keyword("default")) r = *d;
          out.push_back(r);
        } else {
          Expr call_expr;
          call_expr.type = Expr::Type::kFilter;
          call_expr.name = a.positional.empty() ? "string" : a.positional[0].str();
          auto lit = std::make_shared<Expr>();
          lit->literal = x;
          call_expr.items = {lit};
          for (size_t k = 1; k < a.positional.size(); ++k) {
            auto p = std::make_shared<Expr>();
            p->literal = a.positional[k];
            call_expr.items.push_back(p);
          }
          out.push_back(filter(call_expr));
        }
        continue;
      }
      Value subject = attr_based ? attribute(x, a.positional.empty() ? "" : a.positional[0].str()) : x;
      const size_t test_at = attr_based ? 1 : 0;
      bool ok;
      if (a.positional.size() <= test_at) {
        ok = subject.truthy();
      } else {
        Expr t;
        t.type = Expr::Type::kTest;
        t.name = a.positional[test_at].str();
        auto lit = std::make_shared<Expr>();
        lit->literal = subject;
        t.items = {lit};
        for (size_t k = test_at + 1; k < a.positional.size(); ++k) {
          auto p = std::make_shared<Expr>();
          p->literal = a.positional[k];
          t.items.push_back(p);
        }
        ok = test(t);
      }
      if (ok == (f == "selectattr" || f == "select")) out.push_back(x);
    }
    return Value::of_list(std::move(out));
  }
  fail(e.line, e.col, "unknown filter '" + f + "'");
}

bool Renderer::test(const Expr& e) {
  Value v = eval(*e.items[0]);
  auto arg = [&](size_t k) { return k < e.items.size() ? eval(*e.items[k]) : Value(); };
  const std::string& t = e.name;
  if (t == "defined") return v.defined();
  if (t == "undefined") return !v.defined();
  if (t == "none") return v.kind == K::kNone;
  if (t == "string") return v.kind == K::kString;
  if (t == "number") return v.is_number();
  if (t == "integer") return v.kind == K::kInt;
  if (t == "float") return v.kind == K::kFloat;
  if (t == "boolean") return v.kind == K::kBool;
  if (t == "true") return v.kind == K::kBool && v.b;
  if (t == "false") return v.kind == K::kBool && !v.b;
  if (t == "mapping") return v.is_mapping();
  if (t == "sequence" || t == "iterable") return v.kind == K::kList || v.kind == K::kString || (t == "iterable" && v.is_mapping());
  if (t == "callable") return v.kind == K::kFunction;
  if (t == "odd" || t == "even") return v.kind == K::kInt && ((v.i % 2 != 0) == (t == "odd"));
  if (t == "divisibleby") { Value d = arg(1); return d.kind == K::kInt && d.i != 0 && v.kind == K::kInt && v.i % d.i == 0; }
  if (t == "eq" || t == "equalto" || t == "sameas" || t == "==") return jinja::equal(v, arg(1));
  if (t == "ne" || t == "!=") return !jinja::equal(v, arg(1));
  if (t == "in") { Value c = arg(1); Expr dummy; (void)dummy; return c.kind == K::kList ? std::any_of(c.list->begin(), c.list->end(), [&](const Value& x) { return jinja::equal(x, v); }) : c.is_mapping() ? c.member(v.str()) != nullptr : c.kind == K::kString && c.s.find(v.str()) != std::string::npos; }
  if (t == "lower") return v.kind == K::kString && lowercase(v.s) == v.s;
  if (t == "upper") return v.kind == K::kString && upper(v.s) == v.s;
  fail(e.line, e.col, "unknown test '" + t + "'");
}

Value Renderer::binary(const Expr& e) {
  const std::string& op = e.name;
  if (op == "and") { Value l = eval(*e.items[0]); return l.truthy() ? eval(*e.items[1]) : l; }
  if (op == "or") { Value l = eval(*e.items[0]); return l.truthy() ? l : eval(*e.items[1]); }
  Value l = eval(*e.items[0]), r = eval(*e.items[1]);
  if (op == "~") return Value::string(l.str() + r.str());
  if (op == "==") return Value::boolean(jinja::equal(l, r));
  if (op == "!=") return Value::boolean(!jinja::equal(l, r));
  if (op == "<") return Value::boolean(jinja::less(l, r));
  if (op == ">") return Value::boolean(jinja::less(r, l));
  if (op == "<=") return Value::boolean(!jinja::less(r, l));
  if (op == ">=") return Value::boolean(!jinja::less(l, r));
  if (op == "in" || op == "not in") {
    bool found = false;
    if (r.kind == K::kString) found = r.s.find(l.str()) != std::string::npos;
    else if (r.kind == K::kList) found = std::any_of(r.list->begin(), r.list->end(), [&](const Value& x) { return jinja::equal(x, l); });
    else if (r.is_mapping()) found = r.member(l.str()) != nullptr;
    return Value::boolean(op == "in" ? found : !found);
  }
  if (op == "+") {
    if (l.kind == K::kString && r.kind == K::kString) return Value::string(l.s + r.s);
    if (l.kind == K::kList && r.kind == K::kList) { List x = *l.list; x.insert(x.end(), r.list->begin(), r.list->end()); return Value::of_list(std::move(x)); }
  }
  if (op == "*" && l.kind == K::kString && r.kind == K::kInt) { std::string s; for (int64_t k = 0; k < r.i; ++k) s += l.s; return Value::string(s); }
  const bool numbers = (l.is_number() || l.kind == K::kBool) && (r.is_number() || r.kind == K::kBool);
  if (!numbers) fail(e.line, e.col, "'" + op + "' between a " + l.type_name() + " and a " + r.type_name());
  const bool ints = l.kind != K::kFloat && r.kind != K::kFloat;
  const int64_t li = l.kind == K::kBool ? l.b : l.i, ri = r.kind == K::kBool ? r.b : r.i;
  if (op == "+") return ints ? Value::integer(li + ri) : Value::number(l.as_double() + r.as_double());
  if (op == "-") return ints ? Value::integer(li - ri) : Value::number(l.as_double() - r.as_double());
  if (op == "*") return ints ? Value::integer(li * ri) : Value::number(l.as_double() * r.as_double());
  if (op == "**") {
    if (ints && ri >= 0) {
      int64_t p = 1;
      for (int64_t k = 0; k < ri; ++k) p *= li;
      return Value::integer(p);
    }
    return Value::number(std::pow(l.as_double(), r.as_double()));
  }
  if (op == "/") {
    if (r.as_double() == 0) fail(e.line, e.col, "division by zero");
    return Value::number(l.as_double() / r.as_double());
  }
  if (op == "//" || op == "%") {
    if (r.as_double() == 0) fail(e.line, e.col, "division by zero");
    if (ints) {
      int64_t q = li / ri;
      if ((li % ri != 0) && ((li < 0) != (ri < 0))) --q;  // Python floors
      return op == "//" ? Value::integer(q) : Value::integer(li - q * ri);
    }
    const double q = std::floor(l.as_double() / r.as_double());
    return op == "//" ? Value::number(q) : Value::number(l.as_double() - q * r.as_double());
  }
  fail(e.line, e.col, "unknown operator '" + op + "'");
}

void Renderer::install_globals(std::map<std::string, Value>& g) {
  const std::string name = name_;
  g["raise_exception"] = Value::function([name](Args& a) -> Value {
    COLOSSAL_FAIL("[chat template] ", name, " raised: ", a.positional.empty() ? std::string("(no message)") : a.positional[0].str());
  });
  g["strftime_now"] = Value::function([](Args& a) {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof buf, a.positional.empty() ? "%Y-%m-%d" : a.positional[0].s.c_str(), &tm);
    return Value::string(std::string(buf, n));
  });
  g["range"] = Value::function([](Args& a) {
    int64_t start = 0, stop = 0, step = 1;
    if (a.positional.size() == 1) stop = a.positional[0].i;
    else if (a.positional.size() >= 2) start = a.positional[0].i, stop = a.positional[1].i;
    if (a.positional.size() >= 3) step = a.positional[2].i;
    List out;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) out.push_back(Value::integer(k));
    return Value::of_list(std::move(out));
  });
  g["namespace"] = Value::function([](Args& a) {
    Dict d(a.keywords.begin(), a.keywords.end());
    return Value::of_dict(std::move(d), K::kNamespace);
  });
  g["dict"] = Value::function([](Args& a) {
    Dict d(a.keywords.begin(), a.keywords.end());
    return Value::of_dict(std::move(d));
  });
}

}  // namespace

JinjaTemplate::JinjaTemplate(const std::string& source, const std::string& name) : name_(name) {
  root_ = TreeBuilder(segments_of(source, name), name).build();
}

JinjaTemplate::~JinjaTemplate() = default;
JinjaTemplate::JinjaTemplate(JinjaTemplate&&) noexcept = default;

std::string JinjaTemplate::render(const nlohmann::ordered_json& context) const {
  Renderer r(name_, context);
  std::string out;
  r.run(root_->children, out);
  return out;
}

}  // namespace colossal::text
