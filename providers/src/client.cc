// MakeClient: resolves a model spec against the registry and the environment
// into an HTTP client or a replay client.
#include "kforge/providers/client.h"

#include <fmt/format.h>

#include <cstdlib>
#include <set>

#include "http_client.h"
#include "kforge/core/fs.h"
#include "kforge/core/log.h"
#include "kforge/core/mutex.h"
#include "kforge/providers/registry.h"
#include "replay_client.h"

namespace kforge::providers {
namespace {

std::string FirstEnv(const std::vector<std::string>& names) {
  for (const std::string& n : names) {
    if (const char* v = std::getenv(n.c_str()); v && *v) return v;
  }
  return {};
}

// Once per provider and process: every model of a run makes a client.
void WarnOnce(const std::string& provider, const std::string& note) {
  struct Warned {
    Mutex mu;
    std::set<std::string> providers GUARDED_BY(mu);
  };
  static Warned warned;
  MutexLock lock(&warned.mu);
  if (warned.providers.insert(provider).second) LogWarn("providers", "{}: {}", provider, note);
}

std::string Join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? std::string(sep) : "") + v[i];
  return out;
}

}  // namespace

TokenUsage ChatResponse::Billed() const {
  TokenUsage u;
  u.input_tokens = usage.input_tokens + retried_usage.input_tokens;
  u.cached_input_tokens = usage.cached_input_tokens + retried_usage.cached_input_tokens;
  u.output_tokens = usage.output_tokens + retried_usage.output_tokens;
  u.reasoning_tokens = usage.reasoning_tokens + retried_usage.reasoning_tokens;
  u.cost_usd = cost_usd;  // retried attempts included already
  u.priced = cost_known || from_cache;
  return u;
}

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kContentFilter:
      return "content_filter";
    case FinishReason::kError:
      return "error";
    case FinishReason::kOther:
      return "other";
  }
  return "other";
}

int64_t EstimateInputTokens(const ChatRequest& request) {
  size_t chars = request.system.size();
  for (const Message& m : request.messages) chars += m.text.size();
  return static_cast<int64_t>((chars + 2) / 3);
}

CostBound Client::WorstCase(const ChatRequest& request) const {
  CostBound b;
  b.input_tokens = EstimateInputTokens(request);
  b.output_tokens = request.max_output_tokens.value_or(kUnknownOutputTokens);
  return b;
}

Status FinishStatus(const ChatResponse& response) {
  switch (response.finish) {
    case FinishReason::kLength:
      return Error(ErrorKind::kTruncated,
                   fmt::format("{} stopped at the output limit after {} output tokens",
                               response.model, response.usage.output_tokens));
    case FinishReason::kContentFilter:
      return Error(ErrorKind::kContentFilter,
                   fmt::format("{} stopped: content filter", response.model));
    case FinishReason::kError:
      return Error(ErrorKind::kServerError,
                   fmt::format("{} stopped with an error", response.model));
    default:
      return Status::Ok();
  }
}

Result<std::unique_ptr<Client>> MakeClient(const std::string& model_spec,
                                           const ClientOptions& options) {
  if (model_spec.rfind("replay:", 0) == 0) {
    std::filesystem::path path = model_spec.substr(7);
    KF_ASSIGN_OR_RETURN(Cassette cassette, Cassette::Load(path));
    std::unique_ptr<Client> fallback;
    if (!options.replay_strict && !options.replay_fallback_model.empty()) {
      KF_ASSIGN_OR_RETURN(fallback, MakeClient(options.replay_fallback_model, options));
    }
    return std::unique_ptr<Client>(std::make_unique<ReplayClient>(
        std::move(cassette), options.replay_strict, std::move(fallback)));
  }
  KF_ASSIGN_OR_RETURN(ModelSpec spec, ParseModelSpec(model_spec));
  KF_ASSIGN_OR_RETURN(Registry registry,
                      LoadRegistry(options.registry_paths, options.use_builtin_registry));
  const ProviderInfo* provider = registry.FindProvider(spec.provider);
  if (!provider) {
    std::vector<std::string> names;
    for (const auto& [name, p] : registry.providers()) names.push_back(name);
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("model spec '{}': unknown provider '{}' (known: {}, replay)",
                             model_spec, spec.provider, Join(names, ", ")));
  }
  HttpClientConfig config;
  config.provider = *provider;
  if (const ModelInfo* m = registry.FindModel(model_spec)) {
    config.model = *m;
  } else {
    config.model.spec = model_spec;
    config.model.provider = spec.provider;
    config.model.name = spec.model;
  }
  config.wire = config.model.wire.value_or(provider->wire);

  // Base URL: --base-url, then the SDK's environment variable, then the
  // compat spec's URL, then the registry default.
  config.base_url = options.base_url;
  if (config.base_url.empty()) config.base_url = FirstEnv(provider->base_url_env);
  if (config.base_url.empty()) config.base_url = spec.base_url;
  if (config.base_url.empty()) config.base_url = provider->base_url;
  while (!config.base_url.empty() && config.base_url.back() == '/') config.base_url.pop_back();
  if (config.base_url.empty()) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("model spec '{}': provider '{}' has no base URL; give one "
                             "with --base-url or in the registry",
                             model_spec, provider->name));
  }
  if (options.api_key.empty()) {
    std::string note;
    config.api_key = ProviderKeyFromEnvironment(*provider, &note);
    if (!note.empty()) WarnOnce(provider->name, note);
  } else {
    config.api_key = options.api_key;
  }
  if (config.api_key.empty() && provider->key_required) {
    return Error(ErrorKind::kAuth,
                 fmt::format("model spec '{}': no API key; set {}", model_spec,
                             provider->key_env.empty() ? "a key_env in the registry"
                                                       : Join(provider->key_env, " or ")));
  }
  Clock& clock = options.clock ? *options.clock : RealClock();
  config.limiter = options.limiter
                       ? options.limiter
                       : SharedLimiter(provider->name + "|" + config.base_url,
                                       options.limits.value_or(provider->limits), clock);
  if (options.cache_enabled) {
    config.cache = std::make_unique<ResponseCache>(
        options.cache_dir.empty() ? DefaultCacheDir() / "responses" : options.cache_dir);
  }
  if (!options.record_path.empty()) config.recorder = SharedCassetteWriter(options.record_path);
  return std::unique_ptr<Client>(std::make_unique<HttpClient>(std::move(config), options));
}

}  // namespace kforge::providers
