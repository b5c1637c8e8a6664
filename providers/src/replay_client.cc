#include "replay_client.h"

#include <map>

#include "kforge/core/mutex.h"

namespace kforge::providers {

Result<ChatResponse> ReplayClient::Complete(const ChatRequest& request,
                                            const TextCallback& on_text) {
  const std::string hash = RequestHash(request);
  if (const CassetteEntry* e = cassette_.Match(request, hash)) {
    ChatResponse r = e->response;
    r.from_cache = true;  // answered from a recording: nothing was paid now
    r.attempts = 0;
    r.cost_usd = 0;
    r.latency_s = 0;
    if (on_text && !r.text.empty()) on_text(r.text);
    return r;
  }
  if (!strict_ && fallback_) return fallback_->Complete(request, on_text);
  return Error(ErrorKind::kNotFound, cassette_.DescribeMiss(request, hash));
}

std::shared_ptr<CassetteWriter> SharedCassetteWriter(const std::filesystem::path& path) {
  struct Writers {
    Mutex mu;
    std::map<std::string, std::shared_ptr<CassetteWriter>> by_path GUARDED_BY(mu);
  };
  static Writers writers;
  MutexLock lock(&writers.mu);
  auto& w = writers.by_path[std::filesystem::absolute(path).lexically_normal().string()];
  if (!w) w = std::make_shared<CassetteWriter>(path);
  return w;
}

}  // namespace kforge::providers
