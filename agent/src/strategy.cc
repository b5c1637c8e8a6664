#include "kforge/agent/strategy.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "kforge/core/fs.h"
#include "template.h"

namespace kforge::agent {
namespace {

namespace fs = std::filesystem;

Status FieldError(const fs::path& origin, const toml::node* node, std::string_view field,
                  std::string_view what) {
  int line = node ? static_cast<int>(node->source().begin.line) : 0;
  return Error(ErrorKind::kInvalidInput,
               fmt::format("{}:{}: {}: {}", origin.string(), line, field, what));
}

// Reads the strategy's tables field by field, rejecting what it does not know.
class Reader {
 public:
  Reader(const toml::table& root, fs::path origin) : root_(root), origin_(std::move(origin)) {}

  Status CheckKeys(const toml::table& table, std::string_view prefix,
                   const std::set<std::string>& known) {
    for (const auto& [key, node] : table) {
      std::string name(key.str());
      if (!known.count(name)) {
        return FieldError(origin_, &node, fmt::format("{}{}", prefix, name), "unknown field");
      }
    }
    return Status::Ok();
  }

  template <typename T>
  Status Get(const toml::table& table, std::string_view prefix, const char* key, T* out) {
    const toml::node* node = table.get(key);
    if (!node) return Status::Ok();
    // toml++'s value<bool>() also takes an integer (1 reads as true): a
    // switch must be written true or false.
    std::optional<T> v;
    if constexpr (std::is_same_v<T, bool>)
      v = node->value_exact<bool>();
    else
      v = node->value<T>();
    if (!v) return FieldError(origin_, node, fmt::format("{}{}", prefix, key), TypeName<T>());
    *out = *v;
    return Status::Ok();
  }

  template <typename T>
  Status GetOpt(const toml::table& table, std::string_view prefix, const char* key,
                std::optional<T>* out) {
    T value{};
    if (!table.get(key)) return Status::Ok();
    KF_RETURN_IF_ERROR(Get(table, prefix, key, &value));
    *out = value;
    return Status::Ok();
  }

  const fs::path& origin() const { return origin_; }

 private:
  template <typename T>
  static const char* TypeName() {
    if constexpr (std::is_same_v<T, bool>)
      return "expected true or false";
    else if constexpr (std::is_same_v<T, std::string>)
      return "expected a string";
    else if constexpr (std::is_integral_v<T>)
      return "expected an integer";
    else
      return "expected a number";
  }

  const toml::table& root_;
  fs::path origin_;
};

Status Positive(const fs::path& origin, const toml::table& root, const char* key, int value,
                int min) {
  if (value < min)
    return FieldError(origin, root.get(key), key, fmt::format("must be at least {}", min));
  return Status::Ok();
}

Result<std::string> ReadTemplate(const fs::path& origin, const toml::node* node,
                                 std::string_view field, const fs::path& templates_dir,
                                 const std::string& file) {
  fs::path path = templates_dir / file;
  auto text = ReadFile(path);
  if (!text.ok()) {
    return FieldError(
        origin, node, field,
        fmt::format("cannot read template {}: {}", path.string(), text.status().message()));
  }
  KF_RETURN_IF_ERROR(CheckTemplate(*text, path.string()));
  return *text;
}

}  // namespace

Result<Strategy> ParseStrategy(std::string_view toml_text, const fs::path& origin,
                               const fs::path& templates_dir) {
  toml::table root;
  try {
    root = toml::parse(toml_text, origin.string());
  } catch (const toml::parse_error& e) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{}:{}: {}", origin.string(), e.source().begin.line,
                             std::string(e.description())));
  }
  Reader r(root, origin);
  KF_RETURN_IF_ERROR(
      r.CheckKeys(root, "",
                  {"name", "description", "turns", "samples", "refine", "beam", "history",
                   "example", "redteam", "profile", "stop", "model", "templates"}));
  Strategy s;
  s.path = origin;
  s.name = origin.stem().string();
  KF_RETURN_IF_ERROR(r.Get(root, "", "name", &s.name));
  KF_RETURN_IF_ERROR(r.Get(root, "", "description", &s.description));
  KF_RETURN_IF_ERROR(r.Get(root, "", "turns", &s.turns));
  KF_RETURN_IF_ERROR(r.Get(root, "", "samples", &s.samples));
  KF_RETURN_IF_ERROR(r.Get(root, "", "beam", &s.beam));
  KF_RETURN_IF_ERROR(r.Get(root, "", "history", &s.history));
  KF_RETURN_IF_ERROR(r.Get(root, "", "example", &s.example));
  KF_RETURN_IF_ERROR(r.Get(root, "", "redteam", &s.redteam));
  KF_RETURN_IF_ERROR(r.Get(root, "", "profile", &s.profile));
  KF_RETURN_IF_ERROR(Positive(origin, root, "turns", s.turns, 1));
  KF_RETURN_IF_ERROR(Positive(origin, root, "samples", s.samples, 1));
  KF_RETURN_IF_ERROR(Positive(origin, root, "beam", s.beam, 1));
  KF_RETURN_IF_ERROR(Positive(origin, root, "history", s.history, 0));
  std::string refine = "last";
  KF_RETURN_IF_ERROR(r.Get(root, "", "refine", &refine));
  if (refine == "last")
    s.refine = RefineFrom::kLast;
  else if (refine == "best")
    s.refine = RefineFrom::kBest;
  else if (refine == "beam")
    s.refine = RefineFrom::kBeam;
  else
    return FieldError(origin, root.get("refine"), "refine",
                      "expected \"last\", \"best\" or \"beam\"");

  if (const toml::node* n = root.get("stop")) {
    const toml::table* t = n->as_table();
    if (!t) return FieldError(origin, n, "stop", "expected a table");
    KF_RETURN_IF_ERROR(r.CheckKeys(*t, "stop.", {"on_correct", "speedup", "patience"}));
    KF_RETURN_IF_ERROR(r.Get(*t, "stop.", "on_correct", &s.stop.on_correct));
    KF_RETURN_IF_ERROR(r.Get(*t, "stop.", "speedup", &s.stop.speedup));
    KF_RETURN_IF_ERROR(r.Get(*t, "stop.", "patience", &s.stop.patience));
    if (s.stop.speedup < 0)
      return FieldError(origin, t->get("speedup"), "stop.speedup", "must not be negative");
    if (s.stop.patience < 0)
      return FieldError(origin, t->get("patience"), "stop.patience", "must not be negative");
  }
  if (const toml::node* n = root.get("model")) {
    const toml::table* t = n->as_table();
    if (!t) return FieldError(origin, n, "model", "expected a table");
    KF_RETURN_IF_ERROR(
        r.CheckKeys(*t, "model.", {"temperature", "max_output_tokens", "reasoning_effort"}));
    KF_RETURN_IF_ERROR(r.GetOpt(*t, "model.", "temperature", &s.temperature));
    KF_RETURN_IF_ERROR(r.GetOpt(*t, "model.", "max_output_tokens", &s.max_output_tokens));
    KF_RETURN_IF_ERROR(r.GetOpt(*t, "model.", "reasoning_effort", &s.reasoning_effort));
  }

  // Template files: defaults, overridden per key by [templates].
  std::map<std::string, std::string> files = {{"system", "system.mustache"},
                                              {"user", "user.mustache"}};
  std::set<std::string> known = {"system", "user"};
  for (Outcome o : kAllOutcomes) {
    std::string key(OutcomeName(o));
    files[key] = "feedback_" + key + ".mustache";
    known.insert(key);
  }
  const toml::table* templates = nullptr;
  if (const toml::node* n = root.get("templates")) {
    templates = n->as_table();
    if (!templates) return FieldError(origin, n, "templates", "expected a table");
    KF_RETURN_IF_ERROR(r.CheckKeys(*templates, "templates.", known));
    for (auto& [key, file] : files)
      KF_RETURN_IF_ERROR(r.Get(*templates, "templates.", key.c_str(), &file));
  }
  for (const auto& [key, file] : files) {
    const toml::node* node = templates ? templates->get(key) : nullptr;
    KF_ASSIGN_OR_RETURN(std::string text,
                        ReadTemplate(origin, node, "templates." + key, templates_dir, file));
    if (key == "system")
      s.system_template = std::move(text);
    else if (key == "user")
      s.user_template = std::move(text);
    else
      s.feedback_templates[*ParseOutcome(key)] = std::move(text);
  }
  return s;
}

Result<Strategy> LoadStrategy(const fs::path& path) {
  KF_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseStrategy(text, path, path.parent_path().parent_path() / "templates");
}

fs::path DefaultPromptsDir() {
  if (const char* env = std::getenv("KFORGE_PROMPTS_DIR"); env && *env) return env;
  std::error_code ec;
  if (fs::is_directory("prompts/strategies", ec)) return fs::absolute("prompts", ec);
  return DataPath("prompts", KFORGE_SOURCE_ROOT);
}

fs::path DocsDir() {
  if (const char* env = std::getenv("KFORGE_DOCS_DIR"); env && *env) return env;
  return DataPath("docs", KFORGE_SOURCE_ROOT);
}

Result<Strategy> FindStrategy(const std::string& name_or_path, const fs::path& prompts_dir) {
  if (name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".toml")) {
    return LoadStrategy(name_or_path);
  }
  fs::path path = prompts_dir / "strategies" / (name_or_path + ".toml");
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    std::string known;
    for (const auto& n : ListStrategies(prompts_dir)) known += (known.empty() ? "" : ", ") + n;
    return Error(ErrorKind::kNotFound,
                 fmt::format("no strategy '{}' in {} (known: {})", name_or_path,
                             path.parent_path().string(), known));
  }
  return LoadStrategy(path);
}

std::vector<std::string> ListStrategies(const fs::path& prompts_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(prompts_dir / "strategies", ec)) {
    if (entry.path().extension() == ".toml") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace kforge::agent
