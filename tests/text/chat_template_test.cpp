// Chat templates against transformers: tests/text/make_chat_cases.py renders templates in the
// shapes of Llama 3, ChatML with tools (Qwen 2.5), Mistral and Gemma, and one exercising the rest
// of the engine, over conversations with system, user, assistant and tool turns, with and without
// the generation prompt, through transformers' apply_chat_template; ours must render the same
// text, or raise with the template's own message where it raised. Syntax errors name the line and
// column.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/errors.h"
#include "tests/support/python_check.h"
#include "text/jinja.h"

namespace colossal::text {
namespace {

nlohmann::ordered_json chat_cases() {
  static const nlohmann::ordered_json cases = [] {
    const std::string dir = testing::fresh_temp_dir("chat_templates");
    const std::string failed = testing::run_python_check(
        COLOSSAL_TEST_PYTHON, "import runpy, sys\nsys.argv = ['make_chat_cases.py', sys.argv[1] + '/cases.json']\n"
                              "runpy.run_path('" COLOSSAL_TEST_SOURCE_DIR "/text/make_chat_cases.py', run_name='__main__')\n", dir);
    EXPECT_EQ(failed, "");
    std::ifstream in(dir + "/cases.json");
    return nlohmann::ordered_json::parse(in);
  }();
  return cases;
}

TEST(ChatTemplate, RendersAsTransformersDoes) {
  const auto cases = chat_cases();
  ASSERT_GE(cases.size(), 40u);
  int rendered = 0, raised = 0;
  for (const auto& c : cases) {
    const std::string what = c["template"].get<std::string>() + " / " + c["conversation"].get<std::string>() +
                             (c["context"]["add_generation_prompt"].get<bool>() ? " + generation prompt" : "");
    JinjaTemplate t(c["source"].get<std::string>(), c["template"].get<std::string>());
    if (c.contains("expected")) {
      std::string got;
      try {
        got = t.render(c["context"]);
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": raised " << e.what();
        continue;
      }
      EXPECT_EQ(got, c["expected"].get<std::string>()) << what;
      ++rendered;
    } else {
      const auto msg = testing::error_message_of([&] { t.render(c["context"]); });
      EXPECT_NE(msg.find(c["error"].get<std::string>()), std::string::npos) << what << ": " << msg;
      ++raised;
    }
  }
  EXPECT_GE(rendered, 20);
  EXPECT_GE(raised, 4);
}

TEST(ChatTemplate, SyntaxErrorsNameTheLineAndColumn) {
  auto msg = [](const std::string& source) { return testing::error_message_of([&] { JinjaTemplate t(source, "t"); }); };
  auto has = [](const std::string& m, const std::string& part) {
    EXPECT_NE(m.find(part), std::string::npos) << "expected '" << part << "' in: " << m;
  };
  has(msg("hello\n{% for m in messages %}{{ m }}"), "t: syntax error at line 2, column 1: this 'for' has no 'endfor'");
  has(msg("{{ messages[0] "), "line 1, column 1: '{{' is never closed with '}}'");
  has(msg("a\nb {{ 1 + }}"), "line 2, column 3: an expression ends too early");
  has(msg("{% if x %}{% endfor %}"), "unknown or unexpected tag 'endfor'");
  has(msg("{% frobnicate %}"), "unknown or unexpected tag 'frobnicate'");
  auto run = [](const std::string& source) {
    return testing::error_message_of([&] { JinjaTemplate(source, "t").render(nlohmann::ordered_json::object()); });
  };
  has(run("{{ 'x' | nosuchfilter }}"), "unknown filter 'nosuchfilter'");
  has(run("{{ raise_exception('Bad roles') }}"), "t raised: Bad roles");
}

}  // namespace
}  // namespace colossal::text
