// Hex text for opaque bytes the worker sends through JSON (NCCL unique ids,
// CUDA IPC handles).
#pragma once

#include <string>

#include "kforge/core/status.h"

namespace kforge::worker {

inline std::string ToHex(const void* data, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[p[i] >> 4];
    out += kDigits[p[i] & 15];
  }
  return out;
}

// Decodes exactly `n` bytes into `out`; kHarness on malformed text.
inline Status FromHex(const std::string& hex, void* out, size_t n) {
  if (hex.size() != 2 * n) return Error(ErrorKind::kHarness, "malformed hex field");
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  auto* p = static_cast<unsigned char*>(out);
  for (size_t i = 0; i < n; ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return Error(ErrorKind::kHarness, "malformed hex field");
    p[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return Status::Ok();
}

}  // namespace kforge::worker
