// Strict readers for protocol messages. A message from a worker is outside
// input: any field may be missing, of the wrong type, or absurd. WireReader
// checks each field as it is read, keeps the first problem, and never throws,
// so that a malformed reply is an error of that evaluation and never a crash
// of the coordinator.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::eval::wire {

// Upper bounds on anything a message may carry.
inline constexpr size_t kMaxString = 1 << 20;  // bytes of one string field
inline constexpr size_t kMaxArray = 1 << 20;   // elements of one array field
inline constexpr int kMaxJsonDepth = 32;       // nesting of a whole message

class WireReader {
 public:
  // `what` names the message in errors ("reply to 'alloc' from rank 1").
  WireReader(const nlohmann::json& j, std::string what);

  bool ok() const { return error_.empty(); }
  Status status() const;

  // Required fields: a missing or ill-typed field records an error and leaves
  // `out` unchanged. Numbers must be finite and inside [lo, hi].
  void Int(std::string_view key, int64_t* out, int64_t lo = std::numeric_limits<int64_t>::min(),
           int64_t hi = std::numeric_limits<int64_t>::max());
  void Int(std::string_view key, int* out, int lo = std::numeric_limits<int>::min(),
           int hi = std::numeric_limits<int>::max());
  void Uint(std::string_view key, uint64_t* out);
  void Size(std::string_view key, size_t* out, size_t hi = std::numeric_limits<size_t>::max());
  void Double(std::string_view key, double* out, double lo = -std::numeric_limits<double>::max(),
              double hi = std::numeric_limits<double>::max());
  void Bool(std::string_view key, bool* out);
  void String(std::string_view key, std::string* out, size_t max_bytes = kMaxString);
  void Ints(std::string_view key, std::vector<int64_t>* out, size_t max_len = kMaxArray);
  void Ints(std::string_view key, std::vector<int>* out, size_t max_len = kMaxArray);
  void Doubles(std::string_view key, std::vector<double>* out, size_t max_len = kMaxArray);
  void Strings(std::string_view key, std::vector<std::string>* out, size_t max_len = kMaxArray);
  // A nested object or array, to be read by another WireReader; null on error.
  const nlohmann::json* Object(std::string_view key);
  const nlohmann::json* Array(std::string_view key, size_t max_len = kMaxArray);

  // Optional fields: absent leaves `out` unchanged; present must be valid.
  bool Has(std::string_view key) const;

  // Records a problem found by the caller (e.g. a cross-field check).
  void Fail(std::string message);

 private:
  const nlohmann::json* Field(std::string_view key, const char* type);
  const nlohmann::json& j_;
  std::string what_;
  std::string error_;
};

// Rejects text nested deeper than max_depth before it is parsed (linear scan,
// brackets inside strings ignored), so that parsing never recurses deeply.
bool WithinDepth(std::string_view json_text, int max_depth = kMaxJsonDepth);

}  // namespace kforge::eval::wire
