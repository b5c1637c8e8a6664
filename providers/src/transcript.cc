#include "transcript.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kforge/core/fs.h"
#include "kforge/core/hash.h"

namespace kforge::providers {
namespace {

FinishReason ParseFinish(const std::string& s) {
  for (FinishReason f : {FinishReason::kStop, FinishReason::kLength, FinishReason::kContentFilter,
                         FinishReason::kError, FinishReason::kOther}) {
    if (FinishReasonName(f) == s) return f;
  }
  return FinishReason::kOther;
}

}  // namespace

Json RequestToJson(const ChatRequest& r) {
  Json messages = Json::array();
  for (const Message& m : r.messages) messages.push_back({{"role", m.role}, {"text", m.text}});
  Json j = {{"model", r.model}, {"system", r.system}, {"messages", std::move(messages)}};
  if (r.temperature) j["temperature"] = *r.temperature;
  if (r.top_p) j["top_p"] = *r.top_p;
  if (r.max_output_tokens) j["max_output_tokens"] = *r.max_output_tokens;
  if (r.reasoning_effort) j["reasoning_effort"] = *r.reasoning_effort;
  if (r.thinking_budget_tokens) j["thinking_budget_tokens"] = *r.thinking_budget_tokens;
  if (r.seed) j["seed"] = *r.seed;
  if (!r.stop.empty()) j["stop"] = r.stop;
  return j;
}

std::string RequestHash(const ChatRequest& request) {
  // nlohmann::json objects keep keys sorted, so dump() is canonical.
  return Sha256Hex("kforge-request-v1\n" + RequestToJson(request).dump());
}

std::string CacheKey(const ChatRequest& request, const HttpRequest& whole_answer_request) {
  return Sha256Hex(fmt::format("kforge-cache-v2\n{}\n{}\n{}\n{}", RequestHash(request),
                               Json(request.draw).dump(), whole_answer_request.url,
                               whole_answer_request.body));
}

std::string PromptHash(const Json& request_json) {
  Json j = request_json;
  j.erase("model");
  return Sha256Hex("kforge-prompt-v1\n" + j.dump());
}

int TurnIndex(const ChatRequest& request) {
  int n = 0;
  for (const Message& m : request.messages) n += (m.role == "assistant");
  return n;
}

Json ResponseToJson(const ChatResponse& r) {
  return {{"text", r.text},
          {"reasoning", r.reasoning},
          {"finish", FinishReasonName(r.finish)},
          {"usage",
           {{"input_tokens", r.usage.input_tokens},
            {"cached_input_tokens", r.usage.cached_input_tokens},
            {"cache_write_input_tokens", r.usage.cache_write_input_tokens},
            {"output_tokens", r.usage.output_tokens},
            {"reasoning_tokens", r.usage.reasoning_tokens}}},
          {"cost_usd", r.cost_usd},
          {"request_id", r.request_id},
          {"model", r.model},
          {"latency_s", r.latency_s}};
}

Result<ChatResponse> ResponseFromJson(const Json& j, const std::string& where) {
  if (!j.is_object())
    return Error(ErrorKind::kInvalidInput, fmt::format("{}: 'response' must be an object", where));
  if (!JsonField(j, "text").is_string()) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{}: field 'response.text' must be a string", where));
  }
  ChatResponse r;
  r.text = JsonString(j, "text");
  r.reasoning = JsonString(j, "reasoning");
  r.finish = ParseFinish(JsonString(j, "finish", "stop"));
  const Json& u = JsonField(j, "usage");
  r.usage.input_tokens = GetCount(u, "input_tokens");
  r.usage.cached_input_tokens = GetCount(u, "cached_input_tokens");
  r.usage.cache_write_input_tokens = GetCount(u, "cache_write_input_tokens");
  r.usage.output_tokens = GetCount(u, "output_tokens");
  r.usage.reasoning_tokens = GetCount(u, "reasoning_tokens");
  r.cost_usd = JsonField(j, "cost_usd").is_number() ? JsonField(j, "cost_usd").get<double>() : 0.0;
  r.request_id = JsonString(j, "request_id");
  r.model = JsonString(j, "model");
  r.latency_s =
      JsonField(j, "latency_s").is_number() ? JsonField(j, "latency_s").get<double>() : 0.0;
  return r;
}

std::filesystem::path ResponseCache::PathFor(const std::string& key) const {
  return dir_ / key.substr(0, 2) / (key + ".json");
}

std::optional<ChatResponse> ResponseCache::Get(const std::string& key) const {
  auto text = ReadFile(PathFor(key));
  if (!text.ok()) return std::nullopt;
  Json j = Json::parse(*text, nullptr, false);
  if (j.is_discarded()) return std::nullopt;  // a damaged entry is a miss, then overwritten
  auto r = ResponseFromJson(JsonField(j, "response"), PathFor(key).string());
  if (!r.ok()) return std::nullopt;
  return std::move(r).value();
}

Status ResponseCache::Put(const std::string& key, const ChatRequest& request,
                          const std::string& url, const ChatResponse& response) const {
  Json j = {{"key", key},
            {"url", url},
            {"request", RequestToJson(request)},
            {"response", ResponseToJson(response)}};
  return WriteFileAtomic(PathFor(key), j.dump(1) + "\n");
}

Status CassetteWriter::Append(const std::string& hash, const ChatRequest& request,
                              const ChatResponse& response) {
  Json j = {{"hash", hash},
            {"model", request.model},
            {"turn", TurnIndex(request)},
            {"request", RequestToJson(request)},
            {"response", ResponseToJson(response)}};
  std::string line = j.dump() + "\n";
  MutexLock lock(&mu_);
  if (path_.has_parent_path()) KF_RETURN_IF_ERROR(MakeDirs(path_.parent_path()));
  int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    return Error(ErrorKind::kIo, fmt::format("{}: cannot open for appending: {}", path_.string(),
                                             std::strerror(errno)));
  ssize_t n = ::write(fd, line.data(), line.size());
  ::close(fd);
  if (n != static_cast<ssize_t>(line.size()))
    return Error(ErrorKind::kIo, fmt::format("{}: short write", path_.string()));
  return Status::Ok();
}

Result<Cassette> Cassette::Load(const std::filesystem::path& path) {
  KF_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  Cassette c;
  c.path_ = path;
  size_t start = 0;
  for (int line_no = 1; start < text.size(); ++line_no) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos || line.front() == '#') continue;
    std::string where = fmt::format("{}:{}", path.string(), line_no);
    Json j = Json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("{}: not a JSON object (one exchange per line)", where));
    }
    CassetteEntry e;
    e.line = line_no;
    e.hash = JsonString(j, "hash");
    if (const Json& request = JsonField(j, "request"); request.is_object()) {
      e.prompt_hash = PromptHash(request);
    }
    e.model = JsonString(j, "model");
    e.marker = JsonString(j, "marker");
    if (JsonHas(j, "turn")) {
      auto t = JsonOptInt(j, "turn");
      if (!t)
        return Error(ErrorKind::kInvalidInput,
                     fmt::format("{}: field 'turn' must be an integer", where));
      e.turn = static_cast<int>(*t);
    }
    KF_ASSIGN_OR_RETURN(e.response, ResponseFromJson(JsonField(j, "response"), where));
    c.entries_.push_back(std::move(e));
  }
  return c;
}

namespace {

bool MarkerFits(const std::string& marker, const ChatRequest& request) {
  if (marker.empty()) return true;
  if (request.system.find(marker) != std::string::npos) return true;
  for (const Message& m : request.messages) {
    if (m.role != "assistant" && m.text.find(marker) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

const CassetteEntry* Cassette::Match(const ChatRequest& request, const std::string& hash) const {
  for (const CassetteEntry& e : entries_) {
    if (e.hash == hash) return &e;
  }
  const std::string prompt_hash = PromptHash(RequestToJson(request));
  for (const CassetteEntry& e : entries_) {
    if (!e.prompt_hash.empty() && e.prompt_hash == prompt_hash) return &e;
  }
  const int turn = TurnIndex(request);
  for (const CassetteEntry& e : entries_) {
    if (!e.hash.empty()) continue;  // recorded entries match by hash only
    if (!e.model.empty() && e.model != "*" && e.model != request.model) continue;
    if (e.turn && *e.turn != turn) continue;
    if (!MarkerFits(e.marker, request)) continue;
    return &e;
  }
  return nullptr;
}

std::string Cassette::DescribeMiss(const ChatRequest& request, const std::string& hash) const {
  std::string last_user;
  for (const Message& m : request.messages) {
    if (m.role != "assistant") last_user = m.text;
  }
  if (last_user.size() > 80) last_user = last_user.substr(0, 80) + "…";
  size_t recorded = 0;
  for (const CassetteEntry& e : entries_) recorded += !e.hash.empty();
  return fmt::format(
      "replay cassette {} has no recording for model '{}', turn {}, request hash {}: none of "
      "its {} entries fits ({} recorded, matched by the request without its model spec; {} "
      "hand-written, matched by model/turn/marker); last user message: '{}'",
      path_.string(), request.model, TurnIndex(request), hash, entries_.size(), recorded,
      entries_.size() - recorded, last_user);
}

}  // namespace kforge::providers
