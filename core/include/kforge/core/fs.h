// Small filesystem helpers that return Status instead of throwing.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "kforge/core/status.h"

namespace kforge {

Result<std::string> ReadFile(const std::filesystem::path& path);

// Writes via a temporary file in the same directory and rename(2), so readers
// see either the old or the new content, never a torn file. Creates parents.
Status WriteFileAtomic(const std::filesystem::path& path, std::string_view content);

Status MakeDirs(const std::filesystem::path& path);

// $XDG_CACHE_HOME/kforge, else $HOME/.cache/kforge, else /tmp/kforge-cache.
std::filesystem::path DefaultCacheDir();

// A fresh private directory under $TMPDIR (or /tmp) named prefix-XXXXXX.
Result<std::filesystem::path> MakeTempDir(std::string_view prefix);

}  // namespace kforge
