// The replay provider: answers from a cassette instead of the network.
#pragma once

#include <memory>

#include "kforge/providers/client.h"
#include "transcript.h"

namespace kforge::providers {

class ReplayClient final : public Client {
 public:
  // `fallback` (may be null) answers requests that have no recording when
  // `strict` is false.
  ReplayClient(Cassette cassette, bool strict, std::unique_ptr<Client> fallback)
      : cassette_(std::move(cassette)), strict_(strict), fallback_(std::move(fallback)) {}
  Result<ChatResponse> Complete(const ChatRequest& request, const TextCallback& on_text) override;
  // A request without a recording may go to the fallback: its worst case.
  CostBound WorstCase(const ChatRequest& request) const override {
    return !strict_ && fallback_ ? fallback_->WorstCase(request) : Client::WorstCase(request);
  }

 private:
  Cassette cassette_;
  bool strict_;
  std::unique_ptr<Client> fallback_;
};

// One writer per cassette path in the process, so concurrent clients
// recording to the same file never interleave inside a line.
std::shared_ptr<CassetteWriter> SharedCassetteWriter(const std::filesystem::path& path);

}  // namespace kforge::providers
