// Internal to the oracle helpers: argument checks shared by their files. A
// shape mistake is a bug in the calling oracle, never the kernel's fault, so
// every check aborts with the function's name.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace kforge::om::internal {

[[noreturn]] inline void Fail(const char* fn, const std::string& what) {
  std::fprintf(stderr, "oracle_math: %s: %s\n", fn, what.c_str());
  std::abort();
}

inline void CheckDim(const char* fn, const char* name, int64_t value) {
  if (value < 0) Fail(fn, std::string(name) + " is negative (" + std::to_string(value) + ")");
}

inline void CheckSize(const char* fn, const char* name, size_t got, int64_t want) {
  if (static_cast<int64_t>(got) != want) {
    Fail(fn, std::string(name) + " has " + std::to_string(got) + " elements, expected " +
                 std::to_string(want));
  }
}

// Empty is allowed (the documented default), else exactly `want`.
inline void CheckOptional(const char* fn, const char* name, size_t got, int64_t want) {
  if (got != 0) CheckSize(fn, name, got, want);
}

inline void CheckBlock(const char* fn, const char* name, int64_t value) {
  if (value <= 0) Fail(fn, std::string(name) + " must be positive, got " + std::to_string(value));
}

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace kforge::om::internal
