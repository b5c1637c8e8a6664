// The model registry: providers (wire format, base URL, key variables, limits)
// and models (capabilities, limits, prices), read from providers/models.toml
// and any user files. Format: docs/providers.md.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/providers/client.h"

namespace kforge::providers {

enum class WireFormat { kOpenAiChat, kOpenAiResponses, kAnthropic, kGemini };

// "openai_chat", "openai_responses", "anthropic", "gemini".
std::string_view WireFormatName(WireFormat wire);
std::optional<WireFormat> ParseWireFormat(std::string_view name);

struct ProviderInfo {
  std::string name;  // "openai", "anthropic", "together", ...
  WireFormat wire = WireFormat::kOpenAiChat;
  std::string base_url;                   // e.g. https://api.openai.com/v1
  std::vector<std::string> base_url_env;  // first set variable wins over base_url
  std::vector<std::string> key_env;       // first set variable is the key
  bool key_required = true;               // compat servers often take none
  LimiterOptions limits;
};

// How a model takes its reasoning controls.
enum class ReasoningStyle {
  kNone,      // not a reasoning model: effort/budget are dropped
  kEffort,    // OpenAI reasoning_effort / reasoning.effort
  kBudget,    // Anthropic thinking.budget_tokens, Gemini thinkingBudget
  kAdaptive,  // Anthropic adaptive thinking + output_config.effort; Gemini thinkingLevel
};

struct ModelInfo {
  std::string spec;                   // "openai:gpt-5.5"
  std::string provider;               // "openai"
  std::string name;                   // the id sent on the wire: "gpt-5.5"
  std::optional<WireFormat> wire;     // overrides the provider's
  int64_t context_tokens = 0;         // 0: unknown
  int64_t max_output_tokens = 0;      // 0: unknown
  int64_t default_output_tokens = 0;  // sent when the request sets none (Anthropic requires one)
  // Parameters the model rejects; the client leaves them out and logs once.
  // Names: temperature, top_p, seed, stop, max_tokens (use max_completion_tokens).
  std::vector<std::string> rejects;
  ReasoningStyle reasoning = ReasoningStyle::kNone;
  // Dollars per million tokens; nullopt when unknown.
  std::optional<double> input_per_mtok, cached_input_per_mtok, cache_write_per_mtok,
      output_per_mtok;
  std::string notes;
  bool listed = false;  // false: not in any registry file; capabilities unknown

  bool Rejects(std::string_view param) const;
};

// A parsed spec: provider:model, or compat:URL#model.
struct ModelSpec {
  std::string provider;
  std::string model;
  std::string base_url;  // compat only
};
Result<ModelSpec> ParseModelSpec(std::string_view spec);

class Registry {
 public:
  // Reads and merges TOML text; `origin` names the source in errors.
  Status AddToml(std::string_view text, const std::string& origin);
  Status AddFile(const std::filesystem::path& path);

  const ProviderInfo* FindProvider(std::string_view name) const;
  // The entry for a spec, or nullptr. Specs match exactly.
  const ModelInfo* FindModel(std::string_view spec) const;
  const std::map<std::string, ProviderInfo>& providers() const { return providers_; }
  const std::map<std::string, ModelInfo>& models() const { return models_; }

 private:
  std::map<std::string, ProviderInfo> providers_;
  std::map<std::string, ModelInfo> models_;
};

// The user's registry: $XDG_CONFIG_HOME/kforge/models.toml, or
// ~/.config/kforge/models.toml when XDG_CONFIG_HOME is unset or empty (XDG
// Base Directory spec). It need not exist.
std::filesystem::path UserRegistryPath();

// The built-in registry (providers/models.toml, compiled in), then the user's
// registry when the file exists, then `paths`; later entries override earlier
// ones. include_builtin = false reads `paths` only (tests).
Result<Registry> LoadRegistry(const std::vector<std::filesystem::path>& paths,
                              bool include_builtin = true);

// The API key for `provider`: the first of its key_env variables that is set.
// When two set variables hold different keys, *note (if given) says which one
// is used: a user who set both should know which account pays.
std::string ProviderKeyFromEnvironment(const ProviderInfo& provider, std::string* note = nullptr);

// Dollars for `usage` at the model's prices; nullopt when a needed price is unknown.
std::optional<double> CostUsd(const ModelInfo& model, const Usage& usage);

}  // namespace kforge::providers
