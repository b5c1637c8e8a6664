// Internal to the evaluator: looking for the evaluation's canary
// (kforge/evaluator/canary.h) in what a candidate produced, by the trusted
// side only. Two forms are looked for: the token as text and the 16 bytes its
// hex digits encode (a kernel that found the token could store either).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kforge::eval {

// The byte strings to look for: the token and its 16 raw bytes; empty when
// `canary` is no canary token (IsCanaryToken).
std::vector<std::string> CanaryNeedles(std::string_view canary);

struct CanarySighting {
  uint64_t offset = 0;  // of its first byte
  bool raw = false;     // the 16 raw bytes, not the token's text
  // "at byte N" or "at byte N (its 16 raw bytes)".
  std::string Where() const;
};

// The first place in `bytes` where one of `needles` starts (the earliest
// offset; the token before its raw bytes at the same one).
std::optional<CanarySighting> FindCanary(std::string_view bytes,
                                         const std::vector<std::string>& needles);

// The same over a stream fed in pieces of any size: a needle split across
// two pieces is found, at its offset in the whole stream.
class CanaryStreamScanner {
 public:
  // `offset` of the first byte fed (bytes before it were not watched).
  explicit CanaryStreamScanner(std::vector<std::string> needles, uint64_t offset = 0);
  // Feeds the next piece; the first sighting stays (later ones are ignored).
  void Feed(std::string_view piece);
  const std::optional<CanarySighting>& sighting() const { return sighting_; }

 private:
  std::vector<std::string> needles_;
  size_t keep_ = 0;    // the longest needle's length less one
  std::string carry_;  // the last keep_ bytes fed
  uint64_t offset_;    // the stream offset of carry_'s first byte
  std::optional<CanarySighting> sighting_;
};

}  // namespace kforge::eval
