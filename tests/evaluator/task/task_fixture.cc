#include "task_fixture.h"

#include <gtest/gtest.h>

#include <fstream>

#include "kforge/core/fs.h"

namespace kforge::eval::testing {

TempDir::TempDir() {
  auto dir = MakeTempDir("kforge-task-test");
  EXPECT_TRUE(dir.ok()) << dir.status().ToString();
  if (dir.ok()) path_ = *dir;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

std::string SumToml() {
  return R"(id = 1
name = "sum"
title = "Sum over ranks"
category = "collective"
provenance = "test fixture"
description = "Every rank holds x[N]; every rank ends with y = the sum of all ranks' x."
world_sizes = [2, 4, 8]
dtypes = ["f32", "bf16"]

[params]
root = 0

[[inputs]]
name = "x"
dtype = "T"
shape = ["N"]
init = { kind = "normal", mean = 0.0, std = 1.0 }

[[outputs]]
name = "y"
dtype = "T"
shape = ["N"]

[tolerance]
f32 = { atol = 1e-5, rtol = 1e-5 }
bf16 = { atol = 2e-2, rtol = 2e-2 }

[sizes]
check = [ { label = "tiny", N = "8" }, { label = "odd", N = "1001" } ]
bench = [ { label = "1MiB", N = "1Mi / elem" } ]

[perf]
bytes = "N * elem"
busbw_factor = "2 * (W - 1) / W"

[policy]
nccl = false
)";
}

std::string Replace(std::string text, std::string_view from, std::string_view to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "fixture bug: '" << from << "' not in the TOML";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

int LineOf(std::string_view text, std::string_view needle) {
  const size_t at = text.find(needle);
  if (at == std::string_view::npos) return 0;
  int line = 1;
  for (size_t i = 0; i < at; ++i) line += text[i] == '\n';
  return line;
}

std::filesystem::path WriteTask(const std::filesystem::path& root, const std::string& key,
                                const std::string& toml, bool with_reference) {
  const auto dir = root / key;
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "task.toml") << toml;
  if (with_reference) std::ofstream(dir / "reference.cu") << "// baseline\n";
  return dir;
}

Task LoadOrDie(const std::filesystem::path& root, const std::string& key, const std::string& toml) {
  auto t = LoadTask(WriteTask(root, key, toml));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : Task{};
}

}  // namespace kforge::eval::testing
