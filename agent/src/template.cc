#include "kforge/agent/template.h"

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

}  // namespace

Status CheckTemplate(std::string_view text, std::string_view origin) {
  mstch::mustache tmpl{std::string(text)};
  if (!tmpl.is_valid()) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{}: bad template: {}", origin, tmpl.error_message()));
  }
  return Status::Ok();
}

Result<std::string> RenderTemplate(std::string_view text, const nlohmann::json& view,
                                   std::string_view origin) {
  mstch::mustache tmpl{std::string(text)};
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
