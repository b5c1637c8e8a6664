#include "kforge/core/hash.h"

#include <openssl/evp.h>

#include <cstdint>
#include <stdexcept>

namespace kforge {
namespace {

int Nibble(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::string HexEncode(const void* data, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  const auto* d = static_cast<const unsigned char*>(data);
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[d[i] >> 4];
    out[2 * i + 1] = kDigits[d[i] & 15];
  }
  return out;
}

Status HexDecode(std::string_view hex, void* out, size_t n) {
  if (hex.size() != 2 * n) {
    return Error(ErrorKind::kInvalidInput, "malformed hex: " + std::to_string(hex.size()) +
                                               " digits for " + std::to_string(n) + " bytes");
  }
  auto* p = static_cast<unsigned char*>(out);
  for (size_t i = 0; i < n; ++i) {
    int hi = Nibble(hex[2 * i]), lo = Nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return Error(ErrorKind::kInvalidInput, "malformed hex: not a hex digit");
    p[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return Status::Ok();
}

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  return HexEncode(md, n);
}

Hasher::Hasher() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("OpenSSL SHA-256 unavailable");
  }
}

Hasher::~Hasher() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

Hasher& Hasher::Add(std::string_view part) {
  auto* ctx = static_cast<EVP_MD_CTX*>(ctx_);
  uint64_t len = part.size();
  EVP_DigestUpdate(ctx, &len, sizeof(len));
  EVP_DigestUpdate(ctx, part.data(), part.size());
  return *this;
}

std::string Hasher::HexDigest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &n);
  return HexEncode(md, n);
}

}  // namespace kforge
