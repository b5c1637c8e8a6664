// The strict reader of worker replies (evaluator/protocol/wire.h): a reply is
// outside input, so any text must end as a value or an error, never a crash,
// an exception or a deep recursion.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/wire.h"

namespace {

using kforge::eval::wire::WireReader;

// Reads every kind of field under a few keys, then the nested ones, the way a
// reply decoder would.
void ReadAll(const nlohmann::json& j, int depth) {
  WireReader r(j, "fuzzed reply");
  for (const char* key : {"op", "id", "rank", "ms", "ok", "values", "names", "error"}) {
    int64_t i64 = 0;
    int i = 0;
    uint64_t u = 0;
    size_t z = 0;
    double d = 0;
    bool b = false;
    std::string s;
    std::vector<int64_t> v64;
    std::vector<int> vi;
    std::vector<double> vd;
    std::vector<std::string> vs;
    r.Int(key, &i64);
    r.Int(key, &i, -5, 5);
    r.Uint(key, &u);
    r.Size(key, &z, 1 << 20);
    r.Double(key, &d, 0, 1e9);
    r.Bool(key, &b);
    r.String(key, &s, 64);
    r.Ints(key, &v64, 16);
    r.Ints(key, &vi);
    r.Doubles(key, &vd, 16);
    r.Strings(key, &vs, 16);
    (void)r.Has(key);
    if (depth < 4) {
      if (const nlohmann::json* o = r.Object(key)) ReadAll(*o, depth + 1);
      if (const nlohmann::json* a = r.Array(key, 64)) {
        for (const nlohmann::json& e : *a) ReadAll(e, depth + 1);
      }
    }
  }
  if (r.ok() != r.status().ok()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (!kforge::eval::wire::WithinDepth(text)) return 0;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  ReadAll(j, 0);
  return 0;
}
