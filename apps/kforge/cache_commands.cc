// `kforge cache du | clean`: the compile cache (compiled kernels, keyed by
// source, flags and toolchain) and the model-response cache, both under
// $XDG_CACHE_HOME/kforge (core DefaultCacheDir). Cleaning is always safe:
// an entry is a pure function of its key and is rebuilt on the next miss.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "command.h"
#include "exit_codes.h"
#include "kforge/core/fs.h"

namespace kforge::cli {
namespace {

namespace fs = std::filesystem;

struct CacheArgs {
  std::string cache_dir;
  bool responses = false;
};

fs::path Root(const CacheArgs& a) {
  return a.cache_dir.empty() ? DefaultCacheDir() : fs::path(a.cache_dir);
}

struct Usage {
  int64_t entries = 0;  // directories (kernels) or files (responses) directly below
  int64_t files = 0;
  uintmax_t bytes = 0;
};

Result<Usage> Measure(const fs::path& dir) {
  Usage u;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return u;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec))
    ++u.entries;
  if (ec) return Error(ErrorKind::kIo, fmt::format("{}: {}", dir.string(), ec.message()));
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code fe;
    if (it->is_regular_file(fe)) {
      ++u.files;
      u.bytes += it->file_size(fe);
    }
  }
  if (ec) return Error(ErrorKind::kIo, fmt::format("{}: {}", dir.string(), ec.message()));
  return u;
}

std::string Human(uintmax_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int i = 0;
  while (v >= 1024 && i < 4) v /= 1024, ++i;
  return i == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[i]);
}

int Du(const CacheArgs& a) {
  const fs::path root = Root(a);
  for (const char* part : {"kernels", "trusted/kernels", "responses"}) {
    auto u = Measure(root / part);
    if (!u.ok()) return FailWith("cache du", u.status());
    std::printf("%-16s %10s  %6lld entries  %6lld files  %s\n", part, Human(u->bytes).c_str(),
                static_cast<long long>(u->entries), static_cast<long long>(u->files),
                (root / part).c_str());
  }
  return 0;
}

int Clean(const CacheArgs& a) {
  const fs::path root = Root(a);
  std::vector<const char*> parts = {"kernels", "trusted"};
  if (a.responses) parts.push_back("responses");
  for (const char* part : parts) {
    auto u = Measure(root / part);
    if (!u.ok()) return FailWith("cache clean", u.status());
    std::error_code ec;
    fs::remove_all(root / part, ec);
    if (ec)
      return FailWith(
          "cache clean",
          Error(ErrorKind::kIo, fmt::format("{}: {}", (root / part).string(), ec.message())));
    std::printf("removed %s: %lld entries, %s\n", (root / part).c_str(),
                static_cast<long long>(u->entries), Human(u->bytes).c_str());
  }
  return 0;
}

KF_COMMAND("cache", [](CLI::App& app, int& exit_code) {
  auto args = std::make_shared<CacheArgs>();
  CLI::App* cache =
      app.add_subcommand("cache", "Show or empty the compile cache (and the response cache)");
  cache->require_subcommand(1);
  CLI::App* du = cache->add_subcommand("du", "Size of the compile and response caches");
  CLI::App* clean = cache->add_subcommand(
      "clean", "Empty the compile cache (kernels are recompiled on their next use)");
  for (CLI::App* c : {du, clean})
    c->add_option("--cache-dir", args->cache_dir, "cache root (default $XDG_CACHE_HOME/kforge)");
  clean->add_flag("--responses", args->responses,
                  "also empty the model-response cache (answers are paid for again)");
  du->callback([args, &exit_code] { exit_code = Du(*args); });
  clean->callback([args, &exit_code] { exit_code = Clean(*args); });
});

}  // namespace
}  // namespace kforge::cli
