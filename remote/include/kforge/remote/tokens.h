// Bearer tokens of the evaluation server and its clients. A token is a
// secret: it is never logged, printed, stored in a run, or passed to the
// processes that compile or run kernels. Servers and logs name a token by its
// line in the tokens file ("token 2").
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::remote {

// Tokens shorter than this are refused: a guessable token is no lock.
inline constexpr size_t kMinTokenLength = 16;

// Checks that `path` is a regular file that only its owner may read or
// write (mode 0600 or 0400); kInvalidInput naming the file, its mode and the
// chmod that fixes it otherwise. `what` names the file's role in the message.
Status CheckPrivateFile(const std::filesystem::path& path, std::string_view what);

// The server's accepted tokens. Thread-safe after construction.
class TokenSet {
 public:
  // Reads one token per line; blank lines and lines starting with '#' are
  // skipped, surrounding spaces trimmed. Refuses a file others can read
  // (CheckPrivateFile), a file with no token, and tokens shorter than
  // kMinTokenLength or containing spaces (naming the line, never the token).
  static Result<TokenSet> Load(const std::filesystem::path& path);
  // The same rules over tokens already in memory (tests).
  static Result<TokenSet> FromTokens(const std::vector<std::string>& tokens);

  // The index (0-based) of the token equal to `presented`, or -1. Takes the
  // same time whichever token matches, or none: every stored token is
  // compared, over fixed-length digests, with a constant-time comparison.
  int Match(std::string_view presented) const;
  size_t size() const { return digests_.size(); }
  // The line each token came from (1-based), for logs.
  int line(int index) const { return lines_.at(index); }

 private:
  std::vector<std::string> digests_;  // SHA-256 of each token, raw bytes
  std::vector<int> lines_;
};

// The client's token: the first token line of `file` when given (checked
// like a server's tokens file), else the environment variable `env_name`.
// kInvalidInput when neither has one, naming both.
Result<std::string> LoadClientToken(const std::filesystem::path& file, const char* env_name);

// A tokens file for one user's servers and clients: `path` when it already
// holds a usable token (CheckPrivateFile and the rules of Load), else a new
// file (mode 0600) with one random 256-bit token in hex.
Status EnsureTokenFile(const std::filesystem::path& path);

}  // namespace kforge::remote
