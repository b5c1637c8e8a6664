// Content hashing for caches and content-addressed storage.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "kforge/core/status.h"

namespace kforge {

// Lower-case hex of n bytes.
std::string HexEncode(const void* data, size_t n);
// Decodes exactly n bytes (lower-case hex) into out; kInvalidInput otherwise.
Status HexDecode(std::string_view hex, void* out, size_t n);

// Lower-case hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);

// Incremental SHA-256 over several parts; parts are length-prefixed so that
// ("ab","c") and ("a","bc") hash differently.
class Hasher {
 public:
  Hasher();
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;
  Hasher& Add(std::string_view part);
  std::string HexDigest();

 private:
  void* ctx_;  // EVP_MD_CTX*
};

}  // namespace kforge
