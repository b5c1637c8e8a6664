// Small task folders written to a temporary directory, for tests that must
// not depend on the real tasks/ tree.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "kforge/evaluator/task.h"

namespace kforge::eval::testing {

// A fresh directory, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A valid task.toml for a folder named 001_sum: x[N] in, y[N] out, T in
// {f32, bf16}, W in {2, 4, 8}, check sizes tiny (N=8) and odd (N=1001).
std::string SumToml();

// `text` with the first occurrence of `from` replaced by `to` (which must exist).
std::string Replace(std::string text, std::string_view from, std::string_view to);

// 1-based line of the first occurrence of `needle` in `text` (0 if absent).
int LineOf(std::string_view text, std::string_view needle);

// Writes root/key/task.toml (and reference.cu unless told not to); returns the folder.
std::filesystem::path WriteTask(const std::filesystem::path& root, const std::string& key,
                                const std::string& toml, bool with_reference = true);

// Writes and loads; fails the calling test on a load error.
Task LoadOrDie(const std::filesystem::path& root, const std::string& key, const std::string& toml);

}  // namespace kforge::eval::testing
