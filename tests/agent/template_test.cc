#include "template.h"

#include <gtest/gtest.h>

namespace kforge::agent {
namespace {

TEST(Template, RendersFieldsListsAndSectionsWithoutEscaping) {
  nlohmann::json view = {{"name", "a<b>&c"},
                         {"items", {{{"n", 1}}, {{"n", 2.5}}}},
                         {"yes", true},
                         {"no", false},
                         {"code", "if (x) { y(); }"}};
  auto out = RenderTemplate(
      "{{name}}|{{#items}}[{{n}}]{{/items}}|{{#yes}}Y{{/yes}}{{#no}}N{{/no}}{{^no}}n{{/"
      "no}}|{{code}}",
      view, "t");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "a<b>&c|[1][2.5]|Yn|if (x) { y(); }");
}

TEST(Template, MissingValuesRenderEmpty) {
  auto out = RenderTemplate("[{{absent}}]", nlohmann::json::object(), "t");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "[]");
}

// A section's own lines leave nothing behind, rendered or skipped (mustache's
// standalone rule); a skipped section used to leave a blank line per section.
TEST(Template, SectionTagLinesLeaveNoBlankLines) {
  const std::string text =
      "a\n{{#x}}\nX\n{{/x}}\nb\n  {{^x}}\nN\n  {{/x}}\n{{! note }}\n{{#l}}\nL{{.}}\n{{/l}}\nc\n";
  auto render = [&](const nlohmann::json& view) {
    auto out = RenderTemplate(text, view, "t");
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? *out : "";
  };
  EXPECT_EQ(render(nlohmann::json::object()), "a\nb\nN\nc\n");
  EXPECT_EQ(render({{"x", false}, {"l", nlohmann::json::array()}}), "a\nb\nN\nc\n");
  EXPECT_EQ(render({{"x", true}, {"l", {1, 2}}}), "a\nX\nb\nL1\nL2\nc\n");
  // Tags sharing a line with text are not standalone: the line stays.
  auto inline_tags = RenderTemplate("a {{#x}}X{{/x}}\nb\n", nlohmann::json::object(), "t");
  ASSERT_TRUE(inline_tags.ok());
  EXPECT_EQ(*inline_tags, "a \nb\n");
}

TEST(Template, BadTemplateNamesItsOrigin) {
  Status st = CheckTemplate("{{#open}} never closed", "prompts/templates/x.mustache");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("prompts/templates/x.mustache"), std::string::npos);
}

}  // namespace
}  // namespace kforge::agent
