// Mustache templates for prompts and feedback. CUDA is full of braces, so
// templates use mustache tags ({{name}}, {{#list}}...{{/list}}) rather than
// format strings. Values are inserted verbatim: no HTML escaping.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kforge/core/status.h"

namespace kforge::agent {

// Checks that `text` parses; the error names `origin`.
Status CheckTemplate(std::string_view text, std::string_view origin);

// Renders `text` with `view`: objects are sections and fields, arrays are
// lists, booleans gate sections, numbers print in their shortest exact form.
// A value absent from the view renders empty, as mustache specifies. A line
// holding only a section, inverted, closing or comment tag leaves nothing in
// the output, whether the section renders or not (mustache's standalone rule).
Result<std::string> RenderTemplate(std::string_view text, const nlohmann::json& view,
                                   std::string_view origin);

}  // namespace kforge::agent
