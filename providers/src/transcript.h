// The stored forms of requests and responses: the request hash that keys the
// response cache and cassettes, and the JSON both store. Format:
// docs/providers.md ("Cache" and "Replay cassettes").
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "json_util.h"
#include "kforge/core/mutex.h"
#include "kforge/providers/client.h"
#include "kforge/providers/transport.h"

namespace kforge::providers {

// SHA-256 of the canonical JSON of everything that shapes the answer (model
// spec, system, messages, sampling and reasoning options, stop); `stream`
// does not count. Keys never enter it.
std::string RequestHash(const ChatRequest& request);
// The response cache's key: the request (RequestHash), its draw, and the HTTP request the
// adapter builds from it for a whole (non-streaming) answer: the endpoint URL
// with its base URL, the model name sent, every parameter as sent, the
// registry's defaults such as the output cap. Header values (API keys) do not
// count. Prefixed "kforge-cache-v2": keys made before the base URL counted
// are never looked up again, so an old entry is a miss, not a wrong answer.
std::string CacheKey(const ChatRequest& request, const HttpRequest& whole_answer_request);
// The same without the model spec, from RequestToJson's form: what a replay
// matches a recording by, since a replayed request names the cassette
// ("replay:rec.jsonl"), not the model it was recorded from.
std::string PromptHash(const Json& request_json);
Json RequestToJson(const ChatRequest& request);
// The number of assistant messages before the new user turn: 0 for a first prompt.
int TurnIndex(const ChatRequest& request);

Json ResponseToJson(const ChatResponse& response);
// `where` names the file and line in errors.
Result<ChatResponse> ResponseFromJson(const Json& j, const std::string& where);

// Content-addressed store of responses: DIR/ab/abcdef….json. Writes are
// atomic, so concurrent sessions and interrupted runs never see torn entries.
class ResponseCache {
 public:
  explicit ResponseCache(std::filesystem::path dir) : dir_(std::move(dir)) {}
  std::optional<ChatResponse> Get(const std::string& key) const;
  // `url`: where the answer came from, stored beside it for people reading the entry.
  Status Put(const std::string& key, const ChatRequest& request, const std::string& url,
             const ChatResponse& response) const;

 private:
  std::filesystem::path PathFor(const std::string& hash) const;
  std::filesystem::path dir_;
};

// Appends exchanges to a cassette, one JSON line each. Thread-safe within
// the process; each line is written with a single append.
class CassetteWriter {
 public:
  explicit CassetteWriter(std::filesystem::path path) : path_(std::move(path)) {}
  Status Append(const std::string& hash, const ChatRequest& request, const ChatResponse& response);

 private:
  std::filesystem::path path_;
  Mutex mu_;  // one Append at a time writes the file
};

struct CassetteEntry {
  int line = 0;
  std::string hash;         // empty: match by model/turn/marker
  std::string prompt_hash;  // PromptHash of the recorded request ("" when none is stored)
  std::string model;        // empty or "*": any model
  std::optional<int> turn;  // absent: any turn
  std::string marker;       // absent: any request
  ChatResponse response;
};

class Cassette {
 public:
  static Result<Cassette> Load(const std::filesystem::path& path);
  // Exact hash first; then a recording of the same request from any model
  // spec (PromptHash; the first in file order); then the first hand-written
  // entry whose model, turn and marker all fit the request.
  const CassetteEntry* Match(const ChatRequest& request, const std::string& hash) const;
  // A message saying what was asked and what the cassette holds.
  std::string DescribeMiss(const ChatRequest& request, const std::string& hash) const;
  size_t size() const { return entries_.size(); }

 private:
  std::filesystem::path path_;
  std::vector<CassetteEntry> entries_;
};

}  // namespace kforge::providers
