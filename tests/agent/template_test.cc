#include "kforge/agent/template.h"

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

TEST(Template, BadTemplateNamesItsOrigin) {
  Status st = CheckTemplate("{{#open}} never closed", "prompts/templates/x.mustache");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("prompts/templates/x.mustache"), std::string::npos);
}

}  // namespace
}  // namespace kforge::agent
