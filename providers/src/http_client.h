// The Client for every HTTP provider: capability filtering, cache, limiter,
// the retry loop and one attempt's streaming state machine. Wire details come
// from the adapter table.
#pragma once

#include <memory>
#include <random>
#include <string>

#include "adapter.h"
#include "kforge/core/mutex.h"
#include "kforge/providers/client.h"
#include "kforge/providers/limiter.h"
#include "kforge/providers/registry.h"
#include "transcript.h"

namespace kforge::providers {

struct HttpClientConfig {
  ProviderInfo provider;
  ModelInfo model;
  WireFormat wire = WireFormat::kOpenAiChat;
  std::string base_url;
  std::string api_key;
  std::shared_ptr<Limiter> limiter;
  std::unique_ptr<ResponseCache> cache;      // null: caching off
  std::shared_ptr<CassetteWriter> recorder;  // null: not recording
};

class HttpClient final : public Client {
 public:
  HttpClient(HttpClientConfig config, const ClientOptions& options);
  Result<ChatResponse> Complete(const ChatRequest& request, const TextCallback& on_text) override;
  CostBound WorstCase(const ChatRequest& request) const override;

 private:
  // One HTTP exchange; a ProviderError says what failed and the retry hints.
  std::variant<ChatResponse, ProviderError> Attempt(const ChatRequest& request,
                                                    const TextCallback& on_text);
  // The request without the parameters this model rejects (logged once each).
  ChatRequest ForWire(const ChatRequest& request) const;
  double Uniform();
  Status Finish(Status status) const;  // redacts keys from the message
  static void AddUsage(Usage* to, const Usage& more);
  Billed BilledFor(const Usage& usage) const;  // priced at the model's list prices
  void Spend(const Usage& usage) const;        // tells options_.on_spend

  HttpClientConfig config_;
  ClientOptions options_;
  Clock& clock_;
  HttpTransport& transport_;
  const Adapter& adapter_;
  Endpoint endpoint_;
  Mutex rng_mu_;
  std::mt19937_64 rng_ GUARDED_BY(rng_mu_);
};

}  // namespace kforge::providers
