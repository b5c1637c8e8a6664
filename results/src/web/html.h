// Small HTML helpers shared by the published leaderboard and the web UI.
#pragma once

#include <string>
#include <string_view>

namespace kforge::results {

// Escapes &, <, >, " and ' for text and attribute values.
std::string HtmlEscape(std::string_view text);

// A complete page: doctype, charset, title, the shared inline stylesheet,
// `body` and an optional inline script. Nothing is loaded from elsewhere.
std::string HtmlDocument(std::string_view title, std::string_view body,
                         std::string_view script = "");

}  // namespace kforge::results
