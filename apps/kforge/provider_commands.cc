// kforge ask: one request to one model, streamed, with usage and cost: the
// quickest check of a key and a model. kforge models: the registry.
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "command.h"
#include "exit_codes.h"
#include "json_output.h"
#include "kforge/core/status.h"
#include "kforge/providers/client.h"
#include "kforge/providers/registry.h"

namespace kforge::cli {
namespace {

using providers::ChatRequest;
using providers::ClientOptions;

struct AskFlags {
  std::string model, system, prompt, base_url, effort, record;
  std::vector<std::string> registries;
  int max_tokens = 0, thinking_budget = 0;
  double temperature = -1;
  bool no_cache = false, no_stream = false;
};

std::string Price(const std::optional<double>& p) { return p ? fmt::format("{:.3f}", *p) : "-"; }

int RunAsk(const AskFlags& f) {
  ClientOptions options;
  for (const auto& r : f.registries) options.registry_paths.emplace_back(r);
  options.base_url = f.base_url;
  options.cache_enabled = !f.no_cache;
  options.record_path = f.record;
  // Retries are reported by the providers log (one WARN line each).
  auto client = providers::MakeClient(f.model, options);
  if (!client.ok()) return FailWith("ask", client.status());
  ChatRequest req;
  req.model = f.model;
  req.system = f.system;
  std::string prompt = f.prompt;
  if (prompt == "-")
    prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  req.messages = {{"user", prompt}};
  if (f.max_tokens > 0) req.max_output_tokens = f.max_tokens;
  if (f.thinking_budget > 0) req.thinking_budget_tokens = f.thinking_budget;
  if (f.temperature >= 0) req.temperature = f.temperature;
  if (!f.effort.empty()) req.reasoning_effort = f.effort;
  req.stream = !f.no_stream;
  auto resp = (*client)->Complete(req, [](std::string_view delta) {
    std::fwrite(delta.data(), 1, delta.size(), stdout);
    std::fflush(stdout);
  });
  std::fputc('\n', stdout);
  if (!resp.ok()) {
    std::fprintf(stderr, "kforge ask: %s\n", resp.status().ToString().c_str());
    return kExitFailed;  // the call itself failed, whatever its kind
  }
  const auto& u = resp->usage;
  std::string cost = resp->from_cache   ? "$0 (cached)"
                     : resp->cost_known ? fmt::format("${:.6f}", resp->cost_usd)
                                        : "unknown (no price in the registry)";
  std::fprintf(stderr,
               "--\nmodel %s | finish %s | input %lld (cached %lld) | output %lld (reasoning %lld) "
               "| cost %s | "
               "%.2f s | attempts %d | request %s\n",
               resp->model.c_str(), std::string(providers::FinishReasonName(resp->finish)).c_str(),
               static_cast<long long>(u.input_tokens),
               static_cast<long long>(u.cached_input_tokens),
               static_cast<long long>(u.output_tokens), static_cast<long long>(u.reasoning_tokens),
               cost.c_str(), resp->latency_s, resp->attempts, resp->request_id.c_str());
  if (!resp->reasoning.empty())
    std::fprintf(stderr, "(reasoning text: %zu characters)\n", resp->reasoning.size());
  return 0;
}

nlohmann::json Optional(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nullptr; }

nlohmann::json ModelsJson(const providers::Registry& reg) {
  static const char* const kStyles[] = {"none", "effort", "budget", "adaptive"};
  nlohmann::json models = nlohmann::json::array();
  for (const auto& [spec, m] : reg.models()) {
    const auto* p = reg.FindProvider(m.provider);
    auto wire = m.wire ? *m.wire : (p ? p->wire : providers::WireFormat::kOpenAiChat);
    models.push_back(
        {{"spec", spec},
         {"provider", m.provider},
         {"name", m.name},
         {"wire", providers::WireFormatName(wire)},
         {"context_tokens",
          m.context_tokens ? nlohmann::json(m.context_tokens) : nlohmann::json(nullptr)},
         {"max_output_tokens",
          m.max_output_tokens ? nlohmann::json(m.max_output_tokens) : nlohmann::json(nullptr)},
         {"reasoning", kStyles[static_cast<int>(m.reasoning)]},
         {"rejects", m.rejects},
         {"usd_per_mtok",
          {{"input", Optional(m.input_per_mtok)},
           {"cached_input", Optional(m.cached_input_per_mtok)},
           {"cache_write", Optional(m.cache_write_per_mtok)},
           {"output", Optional(m.output_per_mtok)}}}});
  }
  return {{"schema", "kforge.models/1"}, {"models", models}};
}

int RunModels(const std::vector<std::string>& registries, const std::string& json) {
  std::vector<std::filesystem::path> paths(registries.begin(), registries.end());
  auto reg = providers::LoadRegistry(paths);
  if (!reg.ok()) return FailWith("models", reg.status());
  if (!json.empty()) {
    if (Status st = WriteJson(json, ModelsJson(*reg)); !st.ok()) return FailWith("models", st);
    if (json == "-") return 0;
  }
  static const char* const kStyles[] = {"-", "effort", "budget", "adaptive"};
  std::string out =
      fmt::format("{:<38} {:<16} {:>9} {:>8} {:<9} {:<28} {:>8} {:>8} {:>8}\n", "spec", "wire",
                  "context", "max out", "reasoning", "rejects", "$in/M", "$cache/M", "$out/M");
  for (const auto& [spec, m] : reg->models()) {
    const auto* p = reg->FindProvider(m.provider);
    auto wire = m.wire ? *m.wire : (p ? p->wire : providers::WireFormat::kOpenAiChat);
    std::string rejects;
    for (const auto& r : m.rejects) rejects += (rejects.empty() ? "" : ",") + r;
    out += fmt::format(
        "{:<38} {:<16} {:>9} {:>8} {:<9} {:<28} {:>8} {:>8} {:>8}\n", spec,
        providers::WireFormatName(wire), m.context_tokens ? std::to_string(m.context_tokens) : "?",
        m.max_output_tokens ? std::to_string(m.max_output_tokens) : "?",
        kStyles[static_cast<int>(m.reasoning)], rejects.empty() ? "-" : rejects,
        Price(m.input_per_mtok), Price(m.cached_input_per_mtok), Price(m.output_per_mtok));
  }
  out +=
      "\nAny provider:model works even when unlisted (no price, no capability filtering); "
      "compat:http://host:port/v1#model reaches an OpenAI-compatible server.\n";
  std::fputs(out.c_str(), stdout);
  return 0;
}

void AddAsk(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<AskFlags>();
  CLI::App* cmd = app.add_subcommand(
      "ask", "Send one prompt to a model; stream the answer, then usage and cost");
  cmd->add_option("--model,-m", flags->model, "Model spec, e.g. anthropic:claude-opus-4-7")
      ->required();
  cmd->add_option("--system,-s", flags->system, "System prompt");
  cmd->add_option("--max-tokens", flags->max_tokens,
                  "Output token cap (includes reasoning tokens)");
  cmd->add_option("--temperature", flags->temperature,
                  "Sampling temperature (left out for models that reject it)");
  cmd->add_option("--effort", flags->effort, "Reasoning effort: minimal|low|medium|high|xhigh|max");
  cmd->add_option("--thinking-budget", flags->thinking_budget,
                  "Thinking budget in tokens (budget-style models)");
  cmd->add_option("--base-url", flags->base_url,
                  "Override the provider's base URL (gateways, proxies)");
  cmd->add_option("--registry", flags->registries, "Extra model registry file(s)");
  cmd->add_option("--record", flags->record, "Append the exchange to this replay cassette");
  cmd->add_flag("--no-cache", flags->no_cache, "Do not read or write the response cache");
  cmd->add_flag("--no-stream", flags->no_stream, "Ask for one whole response instead of a stream");
  cmd->add_option("prompt", flags->prompt, "The prompt, or - to read it from stdin")->required();
  cmd->callback([flags, &exit_code] { exit_code = RunAsk(*flags); });
}

void AddModels(CLI::App& app, int& exit_code) {
  auto registries = std::make_shared<std::vector<std::string>>();
  auto json = std::make_shared<std::string>();
  CLI::App* cmd =
      app.add_subcommand("models", "List the model registry: capabilities, limits and prices");
  cmd->add_option("--registry", *registries, "Extra model registry file(s)");
  AddJsonOption(cmd, *json);
  cmd->callback([registries, json, &exit_code] { exit_code = RunModels(*registries, *json); });
}

}  // namespace

KF_COMMAND("ask", AddAsk);
KF_COMMAND("models", AddModels);

}  // namespace kforge::cli
