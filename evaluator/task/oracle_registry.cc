#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kforge/core/mutex.h"
#include "kforge/oracle.h"
#include "task/parallel.h"

namespace kforge {
namespace {

struct Registry {
  Mutex mu;
  std::map<std::string, OracleFn, std::less<>> oracles GUARDED_BY(mu);
  std::map<std::string, GeneratorFn, std::less<>> generators GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry r;
  return r;
}

template <typename T>
const T& FindByName(const std::vector<T>& v, std::string_view name, const char* what) {
  for (const auto& t : v) {
    if (t.name == name) return t;
  }
  std::fprintf(stderr, "oracle bug: no %s named '%.*s'\n", what, static_cast<int>(name.size()),
               name.data());
  std::abort();
}

}  // namespace

std::span<const double> OracleIo::in(int rank, std::string_view name) const {
  return FindByName(inputs.at(rank), name, "input").data;
}
std::span<double> OracleIo::out(int rank, std::string_view name) {
  return const_cast<OracleTensor&>(FindByName(outputs.at(rank), name, "output")).data;
}
const std::vector<int64_t>& OracleIo::in_shape(int rank, std::string_view name) const {
  return FindByName(inputs.at(rank), name, "input").shape;
}
const std::vector<int64_t>& OracleIo::out_shape(int rank, std::string_view name) const {
  return FindByName(outputs.at(rank), name, "output").shape;
}
double OracleIo::param(std::string_view name) const {
  auto it = params.find(std::string(name));
  if (it == params.end()) {
    std::fprintf(stderr, "oracle bug: no param named '%.*s'\n", static_cast<int>(name.size()),
                 name.data());
    std::abort();
  }
  return it->second;
}

uint64_t OracleRng::NextU64() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
double OracleRng::Uniform() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }
double OracleRng::Normal() {
  double u1 = Uniform(), u2 = Uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}
int64_t OracleRng::Int(int64_t lo, int64_t hi) {
  uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>(span == 0 ? NextU64() : NextU64() % span);
}

bool RegisterOracle(const std::string& name, OracleFn fn) {
  auto& r = GetRegistry();
  MutexLock lock(&r.mu);
  return r.oracles.emplace(name, std::move(fn)).second;
}
bool RegisterGenerator(const std::string& name, GeneratorFn fn) {
  auto& r = GetRegistry();
  MutexLock lock(&r.mu);
  return r.generators.emplace(name, std::move(fn)).second;
}
const OracleFn* FindOracle(std::string_view name) {
  auto& r = GetRegistry();
  MutexLock lock(&r.mu);
  auto it = r.oracles.find(name);
  return it == r.oracles.end() ? nullptr : &it->second;
}
const GeneratorFn* FindGenerator(std::string_view name) {
  auto& r = GetRegistry();
  MutexLock lock(&r.mu);
  auto it = r.generators.find(name);
  return it == r.generators.end() ? nullptr : &it->second;
}
std::vector<std::string> RegisteredOracles() {
  auto& r = GetRegistry();
  MutexLock lock(&r.mu);
  std::vector<std::string> names;
  for (const auto& [k, v] : r.oracles) names.push_back(k);
  return names;
}

void OracleParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                       int64_t min_per_chunk) {
  eval::internal::ParallelFor(
      n, eval::internal::ThreadsFor(n, 0, std::max<int64_t>(1, min_per_chunk)), fn);
}

}  // namespace kforge
