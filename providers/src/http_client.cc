#include "http_client.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "kforge/core/log.h"
#include "kforge/core/mutex.h"
#include "retry.h"
#include "sse.h"

namespace kforge::providers {
namespace {

constexpr size_t kMaxErrorBody = 1 << 20;

void WarnDroppedOnce(const std::string& spec, std::string_view param) {
  struct Warned {
    Mutex mu;
    std::set<std::string> params GUARDED_BY(mu);  // "spec/param"
  };
  static Warned warned;
  MutexLock lock(&warned.mu);
  if (warned.params.insert(spec + "/" + std::string(param)).second) {
    LogWarn("providers",
            "{} does not accept '{}'; leaving it out of the request (models.toml rejects it)", spec,
            param);
  }
}

double EstimateTokens(const ChatRequest& r, const ModelInfo& m) {
  size_t chars = r.system.size();
  for (const Message& msg : r.messages) chars += msg.text.size();
  // About four characters a token for English and code; the output cap
  // counts against tokens-per-minute limits as OpenAI's limiter does.
  double out =
      r.max_output_tokens ? *r.max_output_tokens : static_cast<double>(m.default_output_tokens);
  return static_cast<double>(chars) / 4.0 + out;
}

}  // namespace

HttpClient::HttpClient(HttpClientConfig config, const ClientOptions& options)
    : config_(std::move(config)),
      options_(options),
      clock_(options.clock ? *options.clock : RealClock()),
      transport_(options.transport ? *options.transport : CurlTransport()),
      adapter_(AdapterFor(config_.wire)),
      rng_(std::random_device{}()) {
  endpoint_.provider = &config_.provider;
  endpoint_.model = &config_.model;
  endpoint_.base_url = config_.base_url;
  endpoint_.api_key = config_.api_key;
}

double HttpClient::Uniform() {
  if (options_.random) return options_.random();
  MutexLock lock(&rng_mu_);
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
}

Status HttpClient::Finish(Status status) const {
  if (status.ok()) return status;
  Status redacted(status.kind(), Redact(status.message(), config_.api_key));
  if (status.billed()) redacted = redacted.WithBilled(*status.billed());
  const auto wait = status.retry_after_s();
  return wait ? redacted.WithRetryAfter(*wait) : redacted;
}

void HttpClient::AddUsage(Usage* to, const Usage& more) {
  to->input_tokens += more.input_tokens;
  to->cached_input_tokens += more.cached_input_tokens;
  to->cache_write_input_tokens += more.cache_write_input_tokens;
  to->output_tokens += more.output_tokens;
  to->reasoning_tokens += more.reasoning_tokens;
}

Billed HttpClient::BilledFor(const Usage& usage) const {
  return Billed{usage.input_tokens, usage.output_tokens, CostUsd(config_.model, usage).value_or(0)};
}

void HttpClient::Spend(const Usage& usage) const {
  if (options_.on_spend && (usage.input_tokens > 0 || usage.output_tokens > 0))
    options_.on_spend(usage, BilledFor(usage).usd);
}

ChatRequest HttpClient::ForWire(const ChatRequest& request) const {
  ChatRequest r = request;
  const ModelInfo& m = config_.model;
  auto drop = [&](std::string_view param, auto& field, bool present) {
    if (present) {
      WarnDroppedOnce(m.spec, param);
      field = {};
    }
  };
  if (m.Rejects("temperature")) drop("temperature", r.temperature, r.temperature.has_value());
  if (m.Rejects("top_p")) drop("top_p", r.top_p, r.top_p.has_value());
  if (m.Rejects("seed") || config_.wire == WireFormat::kOpenAiResponses ||
      config_.wire == WireFormat::kAnthropic) {
    drop("seed", r.seed, r.seed.has_value());
  }
  if (m.Rejects("stop") || config_.wire == WireFormat::kOpenAiResponses)
    drop("stop", r.stop, !r.stop.empty());
  if (m.listed && m.reasoning == ReasoningStyle::kNone) {
    drop("reasoning_effort", r.reasoning_effort, r.reasoning_effort.has_value());
    drop("thinking_budget_tokens", r.thinking_budget_tokens, r.thinking_budget_tokens.has_value());
  }
  // Budget-style models (older Claude, Gemini 2.5) take a budget, not an
  // effort; effort-style models the reverse. Unknown models get what was asked.
  if (m.reasoning == ReasoningStyle::kEffort)
    drop("thinking_budget_tokens", r.thinking_budget_tokens, r.thinking_budget_tokens.has_value());
  if (m.reasoning == ReasoningStyle::kBudget)
    drop("reasoning_effort", r.reasoning_effort, r.reasoning_effort.has_value());
  if (r.max_output_tokens && m.max_output_tokens > 0 &&
      *r.max_output_tokens > m.max_output_tokens) {
    LogWarn("providers",
            "{}: max_output_tokens {} is above the model's limit {}; sending the limit", m.spec,
            *r.max_output_tokens, m.max_output_tokens);
    r.max_output_tokens = static_cast<int>(m.max_output_tokens);
  }
  return r;
}

CostBound HttpClient::WorstCase(const ChatRequest& request) const {
  const ModelInfo& m = config_.model;
  CostBound b;
  b.input_tokens = EstimateInputTokens(request);
  // What ForWire sends: the request's cap, lowered to the model's limit. With
  // no cap the model may write up to its limit (Anthropic's adapter sends the
  // smaller default_output; reserving the limit overstates, never understates).
  if (request.max_output_tokens) {
    b.output_tokens = *request.max_output_tokens;
    if (m.max_output_tokens > 0) b.output_tokens = std::min(b.output_tokens, m.max_output_tokens);
  } else if (m.max_output_tokens > 0) {
    b.output_tokens = m.max_output_tokens;
  } else if (m.default_output_tokens > 0) {
    b.output_tokens = m.default_output_tokens;
  } else {
    b.output_tokens = kUnknownOutputTokens;
  }
  Usage worst;
  worst.input_tokens = b.input_tokens;
  worst.output_tokens = b.output_tokens;
  b.usd = CostUsd(m, worst);  // no cached-input discount: the worst case
  return b;
}

std::variant<ChatResponse, ProviderError> HttpClient::Attempt(const ChatRequest& request,
                                                              const TextCallback& on_text) {
  const bool stream = request.stream;
  HttpRequest http = adapter_.build(request, endpoint_, stream);
  http.connect_timeout = options_.connect_timeout;
  http.total_timeout = options_.total_timeout;
  http.idle_timeout = options_.idle_timeout;

  enum class Mode { kSse, kWhole, kError } mode = Mode::kWhole;
  HttpResponseHead head;
  std::string body;
  SseParser sse;
  std::unique_ptr<StreamDecoder> decoder = adapter_.make_decoder();
  decoder->SetTextCallback(&on_text);
  std::optional<ProviderError> stream_error;

  auto on_head = [&](const HttpResponseHead& h) {
    head = h;
    std::string ct = h.Header("content-type");
    if (h.status >= 300) {
      mode = Mode::kError;
    } else if (stream && ct.find("json") == std::string::npos) {
      mode = Mode::kSse;
    } else {
      // A JSON body on a streaming request is an error or a whole answer
      // (llama.cpp sends a first error as plain JSON; Gemini without alt=sse
      // answers with an array): research notes §7.
      mode = Mode::kWhole;
    }
  };
  auto on_body = [&](std::string_view bytes) {
    if (mode != Mode::kSse) {
      if (mode == Mode::kError && body.size() >= kMaxErrorBody) return true;
      body.append(bytes);
      return true;
    }
    sse.Feed(bytes, [&](const SseEvent& ev) {
      if (!stream_error) stream_error = decoder->OnEvent(ev.event, ev.data);
    });
    return !stream_error.has_value();
  };
  Result<HttpResponseHead> result = transport_.Post(http, on_head, on_body);
  const std::string& who = config_.provider.name;
  if (stream_error) {
    stream_error->status = stream_error->status.WithContext(who);
    stream_error->billed = decoder->response().usage;
    return *std::move(stream_error);
  }
  if (!result.ok()) {
    ProviderError cut{result.status().WithContext(who)};
    cut.billed = decoder->response().usage;
    return cut;
  }
  head = *result;

  if (head.status >= 300) return ClassifyHttpError(who, head, body);
  ChatResponse response;
  if (mode == Mode::kWhole) {
    Json probe = Json::parse(body, nullptr, false);
    if (probe.is_object() && (JsonHas(probe, "error") || JsonString(probe, "type") == "error")) {
      ProviderError e = ClassifyStreamError(body);
      e.status = e.status.WithContext(fmt::format("{} HTTP {}", who, head.status));
      return e;
    }
    auto parsed = adapter_.parse(body);
    if (!parsed.ok()) return ProviderError{parsed.status().WithContext(who)};
    response = std::move(parsed).value();
    if (on_text && !response.text.empty()) on_text(response.text);
  } else {
    // A last event without its blank line still counts; an error from it
    // (a half-written JSON payload) means the stream was cut, reported below.
    sse.Finish([&](const SseEvent& ev) {
      if (!stream_error) stream_error = decoder->OnEvent(ev.event, ev.data);
    });
    if (stream_error && decoder->Done()) {
      stream_error->status = stream_error->status.WithContext(who);
      stream_error->billed = decoder->response().usage;
      return *std::move(stream_error);
    }
    if (!decoder->Done()) {
      ProviderError cut{
          Error(ErrorKind::kTransport,
                fmt::format("{}: the stream ended before its final event ({} characters received)",
                            who, decoder->response().text.size()))};
      cut.billed = decoder->response().usage;
      return cut;
    }
    response = std::move(decoder->response());
  }
  // Support desks ask for the header id (x-request-id, request-id); the body id is the fallback.
  for (const char* h : {"x-request-id", "request-id"}) {
    if (std::string id = head.Header(h); !id.empty()) {
      response.request_id = id;
      break;
    }
  }
  return response;
}

Result<ChatResponse> HttpClient::Complete(const ChatRequest& original,
                                          const TextCallback& on_text) {
  ChatRequest request = original;
  request.model = config_.model.spec;
  if (request.messages.empty()) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{}: the request has no messages", request.model));
  }
  const std::string hash = RequestHash(request);
  const std::string who = request.context.empty()
                              ? request.model
                              : fmt::format("{} ({})", request.model, request.context);
  const ChatRequest wire_request = ForWire(request);
  std::string cache_key;
  if (config_.cache) {
    const HttpRequest whole = adapter_.build(wire_request, endpoint_, /*stream=*/false);
    cache_key = CacheKey(request, whole);
    if (auto hit = config_.cache->Get(cache_key)) {
      hit->from_cache = true;
      hit->attempts = 0;
      hit->cost_usd = 0;  // paid when it was first asked
      hit->latency_s = 0;
      if (on_text && !hit->text.empty()) on_text(hit->text);
      // Said at INFO: an answer nobody asked for now must never pass silently.
      LogInfo("providers",
              "{}: answered from the response cache, nothing sent to {} (key {}; --no-cache asks "
              "again)",
              who, config_.base_url, cache_key.substr(0, 12));
      return *std::move(hit);
    }
  }
  Limiter::Lease lease = config_.limiter->Acquire(EstimateTokens(wire_request, config_.model));
  const Clock::TimePoint start = clock_.Now();

  ChatResponse response;
  Usage retried;  // reported by attempts that failed: billed all the same
  int attempt = 1;
  for (;; ++attempt) {
    auto outcome = Attempt(wire_request, on_text);
    if (auto* ok = std::get_if<ChatResponse>(&outcome)) {
      response = std::move(*ok);
      break;
    }
    ProviderError& err = std::get<ProviderError>(outcome);
    AddUsage(&retried, err.billed);
    RetryDecision d = DecideRetry(err, attempt, options_.retry, Uniform());
    if (!d.retry) {
      Spend(retried);
      return Finish(d.final_status).WithBilled(BilledFor(retried));
    }
    Status why = Finish(err.status);
    LogWarn("providers", "{}: attempt {} failed ({}); retrying in {:.1f} s", who, attempt,
            why.ToString(), d.wait.count() / 1000.0);
    if (options_.on_retry) options_.on_retry(attempt, why, d.wait);
    clock_.SleepFor(d.wait);
  }
  response.attempts = attempt;
  response.latency_s = std::chrono::duration<double>(clock_.Now() - start).count();
  if (response.model.empty()) response.model = config_.model.name;
  std::optional<double> cost = CostUsd(config_.model, response.usage);
  response.cost_known = cost.has_value();
  response.retried_usage = retried;
  response.cost_usd = cost.value_or(0) + BilledFor(retried).usd;
  Usage all = response.usage;
  AddUsage(&all, retried);
  lease.Settle(static_cast<double>(all.input_tokens + all.output_tokens));
  Spend(all);

  // Reasoning tokens count against the output cap everywhere, so a small cap
  // can yield nothing visible: that is a failure the caller must act on
  // (raise the cap or lower the effort), not an empty success.
  // Either way the provider billed the answer: the error says how much.
  if (response.text.empty() && response.finish == FinishReason::kLength) {
    return Error(ErrorKind::kTruncated,
                 fmt::format(
                     "{}: the output limit was reached before any visible text ({} output tokens, "
                     "{} of them reasoning); raise max_output_tokens or lower the reasoning effort",
                     request.model, response.usage.output_tokens, response.usage.reasoning_tokens))
        .WithBilled(BilledFor(all));
  }
  if (response.text.empty() && response.finish == FinishReason::kContentFilter) {
    return Error(ErrorKind::kContentFilter,
                 fmt::format("{}: the provider blocked the answer (request id {})", request.model,
                             response.request_id))
        .WithBilled(BilledFor(all));
  }
  if (config_.cache) {
    if (Status s = config_.cache->Put(cache_key, request, config_.base_url, response); !s.ok())
      LogWarn("providers", "response cache: {}", s.ToString());
  }
  if (config_.recorder) {
    if (Status s = config_.recorder->Append(hash, request, response); !s.ok())
      LogWarn("providers", "recording: {}", s.ToString());
  }
  return response;
}

}  // namespace kforge::providers
