#include "kforge/providers/registry.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cstdlib>

#include "kforge/core/fs.h"

namespace kforge::providers {

// Generated from providers/models.toml at configure time (builtin_models.cc).
extern const char* const kBuiltinModelsToml;

namespace {

std::string Where(const std::string& origin, const toml::node& node) {
  const auto& src = node.source();
  return fmt::format("{}:{}", origin, src.begin.line);
}

Status FieldError(const std::string& origin, const toml::node& node, std::string_view field,
                  std::string_view what) {
  return Error(ErrorKind::kInvalidInput,
               fmt::format("{}: field '{}': {}", Where(origin, node), field, what));
}

Status ReadStrings(const toml::table& t, std::string_view key, const std::string& origin,
                   std::vector<std::string>& out) {
  const toml::node* n = t.get(key);
  if (!n) return Status::Ok();
  if (const auto* s = n->as_string()) {
    out = {s->get()};
    return Status::Ok();
  }
  const auto* arr = n->as_array();
  if (!arr) return FieldError(origin, *n, key, "expected a string or a list of strings");
  out.clear();
  for (const auto& item : *arr) {
    const auto* s = item.as_string();
    if (!s) return FieldError(origin, item, key, "expected strings");
    out.push_back(s->get());
  }
  return Status::Ok();
}

template <typename T>
Status ReadNumber(const toml::table& t, std::string_view key, const std::string& origin, T& out) {
  const toml::node* n = t.get(key);
  if (!n) return Status::Ok();
  if (auto v = n->value<double>()) {
    if (*v < 0) return FieldError(origin, *n, key, "must not be negative");
    out = static_cast<T>(*v);
    return Status::Ok();
  }
  return FieldError(origin, *n, key, "expected a number");
}

Status ReadString(const toml::table& t, std::string_view key, const std::string& origin,
                  std::string& out) {
  const toml::node* n = t.get(key);
  if (!n) return Status::Ok();
  if (auto v = n->value<std::string>()) {
    out = *v;
    return Status::Ok();
  }
  return FieldError(origin, *n, key, "expected a string");
}

Status ReadProvider(const std::string& name, const toml::table& t, const std::string& origin,
                    ProviderInfo& p) {
  p.name = name;
  std::string wire;
  KF_RETURN_IF_ERROR(ReadString(t, "wire", origin, wire));
  if (!wire.empty()) {
    auto w = ParseWireFormat(wire);
    if (!w)
      return FieldError(origin, *t.get("wire"), "wire",
                        "expected openai_chat, openai_responses, anthropic or gemini");
    p.wire = *w;
  }
  KF_RETURN_IF_ERROR(ReadString(t, "base_url", origin, p.base_url));
  KF_RETURN_IF_ERROR(ReadStrings(t, "base_url_env", origin, p.base_url_env));
  KF_RETURN_IF_ERROR(ReadStrings(t, "key_env", origin, p.key_env));
  if (const toml::node* n = t.get("key_required")) {
    auto b = n->value<bool>();
    if (!b) return FieldError(origin, *n, "key_required", "expected true or false");
    p.key_required = *b;
  }
  KF_RETURN_IF_ERROR(ReadNumber(t, "max_in_flight", origin, p.limits.max_in_flight));
  KF_RETURN_IF_ERROR(ReadNumber(t, "requests_per_minute", origin, p.limits.requests_per_minute));
  KF_RETURN_IF_ERROR(ReadNumber(t, "tokens_per_minute", origin, p.limits.tokens_per_minute));
  return Status::Ok();
}

Status ReadPrice(const toml::table& t, std::string_view key, const std::string& origin,
                 std::optional<double>& out) {
  if (!t.get(key)) return Status::Ok();
  double v = 0;
  KF_RETURN_IF_ERROR(ReadNumber(t, key, origin, v));
  out = v;
  return Status::Ok();
}

Status ReadModel(const std::string& spec, const toml::table& t, const std::string& origin,
                 ModelInfo& m) {
  auto parsed = ParseModelSpec(spec);
  if (!parsed.ok())
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{}: {}", Where(origin, t), parsed.status().message()));
  m.spec = spec;
  m.listed = true;
  m.provider = parsed->provider;
  m.name = parsed->model;
  KF_RETURN_IF_ERROR(ReadString(t, "name", origin, m.name));
  std::string wire, reasoning;
  KF_RETURN_IF_ERROR(ReadString(t, "wire", origin, wire));
  if (!wire.empty()) {
    m.wire = ParseWireFormat(wire);
    if (!m.wire)
      return FieldError(origin, *t.get("wire"), "wire",
                        "expected openai_chat, openai_responses, anthropic or gemini");
  }
  KF_RETURN_IF_ERROR(ReadNumber(t, "context", origin, m.context_tokens));
  KF_RETURN_IF_ERROR(ReadNumber(t, "max_output", origin, m.max_output_tokens));
  KF_RETURN_IF_ERROR(ReadNumber(t, "default_output", origin, m.default_output_tokens));
  KF_RETURN_IF_ERROR(ReadStrings(t, "rejects", origin, m.rejects));
  static const char* const kKnownParams[] = {"temperature", "top_p", "seed", "stop", "max_tokens"};
  for (const std::string& r : m.rejects) {
    if (std::find(std::begin(kKnownParams), std::end(kKnownParams), r) == std::end(kKnownParams)) {
      return FieldError(
          origin, *t.get("rejects"), "rejects",
          fmt::format("unknown parameter '{}' (known: temperature, top_p, seed, stop, max_tokens)",
                      r));
    }
  }
  KF_RETURN_IF_ERROR(ReadString(t, "reasoning", origin, reasoning));
  if (reasoning == "effort") {
    m.reasoning = ReasoningStyle::kEffort;
  } else if (reasoning == "budget") {
    m.reasoning = ReasoningStyle::kBudget;
  } else if (reasoning == "adaptive") {
    m.reasoning = ReasoningStyle::kAdaptive;
  } else if (!reasoning.empty() && reasoning != "none") {
    return FieldError(origin, *t.get("reasoning"), "reasoning",
                      "expected none, effort, budget or adaptive");
  }
  if (const toml::node* n = t.get("price")) {
    const toml::table* price = n->as_table();
    if (!price)
      return FieldError(origin, *n, "price",
                        "expected a table {input, cached_input, cache_write, output}");
    KF_RETURN_IF_ERROR(ReadPrice(*price, "input", origin, m.input_per_mtok));
    KF_RETURN_IF_ERROR(ReadPrice(*price, "cached_input", origin, m.cached_input_per_mtok));
    KF_RETURN_IF_ERROR(ReadPrice(*price, "cache_write", origin, m.cache_write_per_mtok));
    KF_RETURN_IF_ERROR(ReadPrice(*price, "output", origin, m.output_per_mtok));
  }
  KF_RETURN_IF_ERROR(ReadString(t, "notes", origin, m.notes));
  return Status::Ok();
}

}  // namespace

std::string_view WireFormatName(WireFormat wire) {
  switch (wire) {
    case WireFormat::kOpenAiChat:
      return "openai_chat";
    case WireFormat::kOpenAiResponses:
      return "openai_responses";
    case WireFormat::kAnthropic:
      return "anthropic";
    case WireFormat::kGemini:
      return "gemini";
  }
  return "?";
}

std::optional<WireFormat> ParseWireFormat(std::string_view name) {
  for (WireFormat w : {WireFormat::kOpenAiChat, WireFormat::kOpenAiResponses,
                       WireFormat::kAnthropic, WireFormat::kGemini}) {
    if (WireFormatName(w) == name) return w;
  }
  return std::nullopt;
}

bool ModelInfo::Rejects(std::string_view param) const {
  return std::find(rejects.begin(), rejects.end(), param) != rejects.end();
}

Result<ModelSpec> ParseModelSpec(std::string_view spec) {
  size_t colon = spec.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == spec.size()) {
    return Error(
        ErrorKind::kInvalidInput,
        fmt::format("model spec '{}': expected provider:model (e.g. anthropic:claude-opus-4-7) "
                    "or compat:http://host:port/v1#model",
                    spec));
  }
  ModelSpec out;
  out.provider = std::string(spec.substr(0, colon));
  std::string_view rest = spec.substr(colon + 1);
  if (out.provider == "compat") {
    size_t hash = rest.rfind('#');
    if (hash == std::string_view::npos || hash == 0 || hash + 1 == rest.size() ||
        (rest.substr(0, 7) != "http://" && rest.substr(0, 8) != "https://")) {
      return Error(
          ErrorKind::kInvalidInput,
          fmt::format("model spec '{}': compat specs are compat:http://host:port/v1#model-name",
                      spec));
    }
    out.base_url = std::string(rest.substr(0, hash));
    while (!out.base_url.empty() && out.base_url.back() == '/') out.base_url.pop_back();
    out.model = std::string(rest.substr(hash + 1));
  } else {
    out.model = std::string(rest);
  }
  return out;
}

Status Registry::AddToml(std::string_view text, const std::string& origin) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{}:{}: {}", origin, e.source().begin.line, e.description()));
  }
  if (const toml::node* n = root.get("providers")) {
    const toml::table* providers = n->as_table();
    if (!providers) return FieldError(origin, *n, "providers", "expected a table of providers");
    for (const auto& [key, node] : *providers) {
      const toml::table* t = node.as_table();
      if (!t) return FieldError(origin, node, std::string(key.str()), "expected a table");
      std::string name(key.str());
      ProviderInfo p = providers_.count(name) ? providers_[name] : ProviderInfo{};
      KF_RETURN_IF_ERROR(ReadProvider(name, *t, origin, p));
      providers_[name] = std::move(p);
    }
  }
  if (const toml::node* n = root.get("models")) {
    const toml::table* models = n->as_table();
    if (!models) return FieldError(origin, *n, "models", "expected a table keyed by model spec");
    for (const auto& [key, node] : *models) {
      const toml::table* t = node.as_table();
      if (!t) return FieldError(origin, node, std::string(key.str()), "expected a table");
      ModelInfo m;
      KF_RETURN_IF_ERROR(ReadModel(std::string(key.str()), *t, origin, m));
      models_[m.spec] = std::move(m);
    }
  }
  for (const auto& [key, node] : root) {
    if (key.str() != "providers" && key.str() != "models") {
      return FieldError(origin, node, std::string(key.str()),
                        "unknown top-level key (expected [providers.*] or [models.\"spec\"])");
    }
  }
  return Status::Ok();
}

Status Registry::AddFile(const std::filesystem::path& path) {
  KF_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return AddToml(text, path.string());
}

const ProviderInfo* Registry::FindProvider(std::string_view name) const {
  auto it = providers_.find(std::string(name));
  return it == providers_.end() ? nullptr : &it->second;
}

const ModelInfo* Registry::FindModel(std::string_view spec) const {
  auto it = models_.find(std::string(spec));
  return it == models_.end() ? nullptr : &it->second;
}

Result<Registry> LoadRegistry(const std::vector<std::filesystem::path>& paths,
                              bool include_builtin) {
  Registry r;
  if (include_builtin) {
    KF_RETURN_IF_ERROR(r.AddToml(kBuiltinModelsToml, "providers/models.toml"));
    const std::filesystem::path user = UserRegistryPath();
    std::error_code ec;
    if (!user.empty() && std::filesystem::exists(user, ec)) KF_RETURN_IF_ERROR(r.AddFile(user));
  }
  for (const auto& p : paths) KF_RETURN_IF_ERROR(r.AddFile(p));
  return r;
}

std::filesystem::path UserRegistryPath() {
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  // The spec: a relative XDG_CONFIG_HOME is invalid and ignored.
  if (xdg && *xdg == '/') return std::filesystem::path(xdg) / "kforge" / "models.toml";
  const char* home = std::getenv("HOME");
  if (!home || !*home) return {};
  return std::filesystem::path(home) / ".config" / "kforge" / "models.toml";
}

std::string ProviderKeyFromEnvironment(const ProviderInfo& provider, std::string* note) {
  std::string key, used;
  for (const std::string& name : provider.key_env) {
    const char* v = std::getenv(name.c_str());
    if (!v || !*v) continue;
    if (key.empty()) {
      key = v;
      used = name;
    } else if (key != v && note) {
      *note = fmt::format("{} and {} are both set and differ; using {}", used, name, used);
      break;
    }
  }
  return key;
}

std::optional<double> CostUsd(const ModelInfo& m, const Usage& u) {
  if (!m.input_per_mtok || !m.output_per_mtok) return std::nullopt;
  double in = *m.input_per_mtok;
  // Without a cached price, cached tokens cost full price: overstating is
  // safer than understating for a budget.
  double cached = m.cached_input_per_mtok.value_or(in);
  double write = m.cache_write_per_mtok.value_or(in);
  int64_t plain =
      std::max<int64_t>(0, u.input_tokens - u.cached_input_tokens - u.cache_write_input_tokens);
  double dollars = plain * in + u.cached_input_tokens * cached +
                   u.cache_write_input_tokens * write + u.output_tokens * *m.output_per_mtok;
  return dollars / 1e6;
}

}  // namespace kforge::providers
