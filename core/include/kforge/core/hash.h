// Content hashing for caches and content-addressed storage.
#pragma once

#include <string>
#include <string_view>

namespace kforge {

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
