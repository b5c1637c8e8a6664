#include "template.h"

#include <fmt/format.h>

#include <kainjow/mustache.hpp>

namespace kforge::agent {
namespace {

namespace mstch = kainjow::mustache;

std::string NumberText(const nlohmann::json& v) {
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  return fmt::format("{}", v.get<double>());
}

mstch::data ToData(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::object: {
      mstch::data d{mstch::data::type::object};
      for (auto it = v.begin(); it != v.end(); ++it) d.set(it.key(), ToData(it.value()));
      return d;
    }
    case nlohmann::json::value_t::array: {
      mstch::data d{mstch::data::type::list};
      for (const auto& item : v) d.push_back(ToData(item));
      return d;
    }
    case nlohmann::json::value_t::boolean:
      return mstch::data{v.get<bool>()};
    case nlohmann::json::value_t::string:
      return mstch::data{v.get<std::string>()};
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float:
      return mstch::data{NumberText(v)};
    default:
      return mstch::data{false};
  }
}

// Mustache's "standalone lines" rule (spec, sections.yml and comments.yml): a
// line holding only a section, inverted-section, closing or comment tag (and
// white space) is removed from the output. kainjow drops such a line only when
// a section rendered on it (its line buffer's contained_section_tag), so the
// closing line of a skipped section, and a comment line, became blank lines.
// Each standalone tag gets an empty inverted section of a name no view has
// beside it: that section always renders, so kainjow drops the line either way.
constexpr std::string_view kStandaloneMark = "{{^__kforge_standalone__}}{{/__kforge_standalone__}}";

std::string MarkStandaloneLines(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    size_t first = line.find_first_not_of(" \t");
    size_t last = line.find_last_not_of(" \t");
    std::string_view tag =
        first == std::string_view::npos ? std::string_view() : line.substr(first, last - first + 1);
    out += line;
    if (tag.size() > 5 && tag.substr(0, 2) == "{{" &&
        std::string_view("#^/!").find(tag[2]) != std::string_view::npos &&
        tag.find("}}") == tag.size() - 2)
      out += kStandaloneMark;
    if (end < text.size()) out += '\n';
    start = end + 1;
  }
  return out;
}

}  // namespace

Status CheckTemplate(std::string_view text, std::string_view origin) {
  mstch::mustache tmpl{MarkStandaloneLines(text)};
  if (!tmpl.is_valid()) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{}: bad template: {}", origin, tmpl.error_message()));
  }
  return Status::Ok();
}

Result<std::string> RenderTemplate(std::string_view text, const nlohmann::json& view,
                                   std::string_view origin) {
  mstch::mustache tmpl{MarkStandaloneLines(text)};
  if (!tmpl.is_valid()) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{}: bad template: {}", origin, tmpl.error_message()));
  }
  tmpl.set_custom_escape([](const std::string& s) { return s; });
  std::string out = tmpl.render(ToData(view));
  if (!tmpl.is_valid()) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{}: render failed: {}", origin, tmpl.error_message()));
  }
  return out;
}

}  // namespace kforge::agent
