#include "kforge/core/hash.h"

#include <openssl/evp.h>

#include <cstdint>
#include <stdexcept>

namespace kforge {
namespace {

std::string ToHex(const unsigned char* d, unsigned n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (unsigned i = 0; i < n; ++i) {
    out[2 * i] = kDigits[d[i] >> 4];
    out[2 * i + 1] = kDigits[d[i] & 15];
  }
  return out;
}

}  // namespace

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  return ToHex(md, n);
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
  return ToHex(md, n);
}

}  // namespace kforge
