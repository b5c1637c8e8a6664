#include "protocol/wire.h"

#include <fmt/format.h>

#include <cmath>

namespace kforge::eval::wire {

WireReader::WireReader(const nlohmann::json& j, std::string what) : j_(j), what_(std::move(what)) {
  if (!j_.is_object()) error_ = "not a JSON object";
}

Status WireReader::status() const {
  if (ok()) return Status::Ok();
  return Error(ErrorKind::kHarness, fmt::format("malformed {}: {}", what_, error_));
}

void WireReader::Fail(std::string message) {
  if (error_.empty()) error_ = std::move(message);
}

bool WireReader::Has(std::string_view key) const {
  return j_.is_object() && j_.find(key) != j_.end();
}

const nlohmann::json* WireReader::Field(std::string_view key, const char* type) {
  if (!ok()) return nullptr;
  auto it = j_.find(key);
  if (it == j_.end()) {
    Fail(fmt::format("field '{}' is missing", key));
    return nullptr;
  }
  (void)type;
  return &*it;
}

void WireReader::Int(std::string_view key, int64_t* out, int64_t lo, int64_t hi) {
  const nlohmann::json* v = Field(key, "integer");
  if (v == nullptr) return;
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Fail(fmt::format("field '{}' is out of range", key));
    }
    x = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else {
    return Fail(fmt::format("field '{}' is not an integer", key));
  }
  if (x < lo || x > hi) {
    return Fail(fmt::format("field '{}' = {} is outside [{}, {}]", key, x, lo, hi));
  }
  *out = x;
}

void WireReader::Int(std::string_view key, int* out, int lo, int hi) {
  int64_t x = 0;
  Int(key, &x, lo, hi);
  if (ok()) *out = static_cast<int>(x);
}

void WireReader::Uint(std::string_view key, uint64_t* out) {
  const nlohmann::json* v = Field(key, "unsigned");
  if (v == nullptr) return;
  if (v->is_number_unsigned()) {
    *out = v->get<uint64_t>();
  } else if (v->is_number_integer() && v->get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(v->get<int64_t>());
  } else {
    Fail(fmt::format("field '{}' is not an unsigned integer", key));
  }
}

void WireReader::Size(std::string_view key, size_t* out, size_t hi) {
  uint64_t x = 0;
  Uint(key, &x);
  if (!ok()) return;
  if (x > hi) return Fail(fmt::format("field '{}' = {} exceeds {}", key, x, hi));
  *out = static_cast<size_t>(x);
}

void WireReader::Double(std::string_view key, double* out, double lo, double hi) {
  const nlohmann::json* v = Field(key, "number");
  if (v == nullptr) return;
  if (!v->is_number()) return Fail(fmt::format("field '{}' is not a number", key));
  double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    return Fail(fmt::format("field '{}' = {} is outside [{}, {}]", key, x, lo, hi));
  }
  *out = x;
}

void WireReader::Bool(std::string_view key, bool* out) {
  const nlohmann::json* v = Field(key, "boolean");
  if (v == nullptr) return;
  if (!v->is_boolean()) return Fail(fmt::format("field '{}' is not a boolean", key));
  *out = v->get<bool>();
}

void WireReader::String(std::string_view key, std::string* out, size_t max_bytes) {
  const nlohmann::json* v = Field(key, "string");
  if (v == nullptr) return;
  if (!v->is_string()) return Fail(fmt::format("field '{}' is not a string", key));
  const auto& s = v->get_ref<const std::string&>();
  if (s.size() > max_bytes) {
    return Fail(fmt::format("field '{}' is longer than {} bytes", key, max_bytes));
  }
  *out = s;
}

const nlohmann::json* WireReader::Array(std::string_view key, size_t max_len) {
  const nlohmann::json* v = Field(key, "array");
  if (v == nullptr) return nullptr;
  if (!v->is_array()) {
    Fail(fmt::format("field '{}' is not an array", key));
    return nullptr;
  }
  if (v->size() > max_len) {
    Fail(fmt::format("field '{}' has more than {} elements", key, max_len));
    return nullptr;
  }
  return v;
}

const nlohmann::json* WireReader::Object(std::string_view key) {
  const nlohmann::json* v = Field(key, "object");
  if (v == nullptr) return nullptr;
  if (!v->is_object()) {
    Fail(fmt::format("field '{}' is not an object", key));
    return nullptr;
  }
  return v;
}

void WireReader::Ints(std::string_view key, std::vector<int64_t>* out, size_t max_len) {
  const nlohmann::json* a = Array(key, max_len);
  if (a == nullptr) return;
  std::vector<int64_t> v;
  v.reserve(a->size());
  for (const auto& e : *a) {
    if (!e.is_number_integer()) return Fail(fmt::format("field '{}' holds a non-integer", key));
    v.push_back(e.get<int64_t>());
  }
  *out = std::move(v);
}

void WireReader::Ints(std::string_view key, std::vector<int>* out, size_t max_len) {
  std::vector<int64_t> v;
  Ints(key, &v, max_len);
  if (!ok()) return;
  out->clear();
  for (int64_t x : v) {
    if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max()) {
      return Fail(fmt::format("field '{}' holds an out-of-range integer", key));
    }
    out->push_back(static_cast<int>(x));
  }
}

void WireReader::Doubles(std::string_view key, std::vector<double>* out, size_t max_len) {
  const nlohmann::json* a = Array(key, max_len);
  if (a == nullptr) return;
  std::vector<double> v;
  v.reserve(a->size());
  for (const auto& e : *a) {
    if (!e.is_number()) return Fail(fmt::format("field '{}' holds a non-number", key));
    double x = e.get<double>();
    if (!std::isfinite(x)) return Fail(fmt::format("field '{}' holds a non-finite number", key));
    v.push_back(x);
  }
  *out = std::move(v);
}

void WireReader::Strings(std::string_view key, std::vector<std::string>* out, size_t max_len) {
  const nlohmann::json* a = Array(key, max_len);
  if (a == nullptr) return;
  std::vector<std::string> v;
  for (const auto& e : *a) {
    if (!e.is_string() || e.get_ref<const std::string&>().size() > kMaxString) {
      return Fail(fmt::format("field '{}' holds a non-string", key));
    }
    v.push_back(e.get<std::string>());
  }
  *out = std::move(v);
}

bool WithinDepth(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

}  // namespace kforge::eval::wire
