#include "kforge/remote/tokens.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "kforge/core/fs.h"
#include "kforge/core/strings.h"

namespace kforge::remote {
namespace {

namespace fs = std::filesystem;

std::string Digest(std::string_view token) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), d);
  return std::string(reinterpret_cast<const char*>(d), sizeof d);
}

struct TokenLine {
  std::string token;
  int line = 0;
};

Result<std::vector<TokenLine>> ParseTokens(std::string_view text, const std::string& origin) {
  std::vector<TokenLine> out;
  int line = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view t = TrimView(text.substr(pos, nl - pos));
    ++line;
    pos = nl + 1;
    if (t.empty() || t.front() == '#') continue;
    if (t.find_first_of(" \t") != std::string_view::npos) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("{}:{}: a token may not contain spaces", origin, line));
    }
    if (t.size() < kMinTokenLength) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("{}:{}: the token is shorter than {} characters (make one with "
                               "`openssl rand -hex 32`)",
                               origin, line, kMinTokenLength));
    }
    out.push_back({std::string(t), line});
  }
  if (out.empty())
    return Error(ErrorKind::kInvalidInput, fmt::format("{}: no token in the file", origin));
  return out;
}

}  // namespace

Status CheckPrivateFile(const fs::path& path, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Error(ErrorKind::kNotFound,
                 fmt::format("{} {}: cannot read it ({})", what, path.string(), strerror(errno)));
  }
  if (!S_ISREG(st.st_mode))
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{} {}: not a regular file", what, path.string()));
  if ((st.st_mode & 077) != 0) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{} {} may be read by other users (mode {:04o}); it holds secrets: "
                             "`chmod 600 {}`",
                             what, path.string(), st.st_mode & 07777, path.string()));
  }
  return Status::Ok();
}

Result<TokenSet> TokenSet::Load(const fs::path& path) {
  KF_RETURN_IF_ERROR(CheckPrivateFile(path, "tokens file"));
  KF_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  KF_ASSIGN_OR_RETURN(auto tokens, ParseTokens(text, path.string()));
  TokenSet set;
  for (const auto& t : tokens) {
    set.digests_.push_back(Digest(t.token));
    set.lines_.push_back(t.line);
  }
  return set;
}

Result<TokenSet> TokenSet::FromTokens(const std::vector<std::string>& tokens) {
  std::string text;
  for (const auto& t : tokens) text += t + "\n";
  KF_ASSIGN_OR_RETURN(auto parsed, ParseTokens(text, "tokens"));
  TokenSet set;
  for (const auto& t : parsed) {
    set.digests_.push_back(Digest(t.token));
    set.lines_.push_back(t.line);
  }
  return set;
}

int TokenSet::Match(std::string_view presented) const {
  const std::string d = Digest(presented);
  int found = -1;
  for (size_t i = 0; i < digests_.size(); ++i) {
    // No early exit: every token is compared whatever matched before.
    const bool equal = CRYPTO_memcmp(d.data(), digests_[i].data(), d.size()) == 0;
    found = equal ? static_cast<int>(i) : found;
  }
  return found;
}

Result<std::string> LoadClientToken(const fs::path& file, const char* env_name) {
  if (!file.empty()) {
    KF_RETURN_IF_ERROR(CheckPrivateFile(file, "token file"));
    KF_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
    KF_ASSIGN_OR_RETURN(auto tokens, ParseTokens(text, file.string()));
    return tokens.front().token;
  }
  if (const char* env = std::getenv(env_name); env && *env) {
    std::string t(TrimView(env));
    if (t.size() < kMinTokenLength)
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("${} is shorter than {} characters", env_name, kMinTokenLength));
    return t;
  }
  return Error(ErrorKind::kInvalidInput,
               fmt::format("no token for the evaluation servers: pass --eval-token-file FILE "
                           "(mode 0600) or set ${}",
                           env_name));
}

Status EnsureTokenFile(const fs::path& path) {
  if (fs::exists(path)) return TokenSet::Load(path).status();
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1)
    return Error(ErrorKind::kInternal, "no random bytes for a token (RAND_bytes)");
  std::string hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  // mkstemp in WriteFileAtomic creates the file 0600.
  KF_RETURN_IF_ERROR(WriteFileAtomic(
      path, "# eval-server tokens (kforge); one a line, keep this file private\n" + hex + "\n"));
  return CheckPrivateFile(path, "tokens file");
}

}  // namespace kforge::remote
