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
// The file is private (mode 0600, mkstemp's): stores, caches and token files
// rely on it.
Status WriteFileAtomic(const std::filesystem::path& path, std::string_view content);

// WriteFileAtomic for outputs meant to be read by others (a leaderboard page,
// an export, a JSON document): the file gets the mode creat(path, 0666)
// would give it, 0666 less the umask.
Status WritePublishedFile(const std::filesystem::path& path, std::string_view content);

// WritePublishedFile that never replaces a file: when `path` exists (even if
// it appears while this writes) it is left as it was and the error,
// kInvalidInput, names it. The new file appears whole or not at all.
Status WriteNewPublishedFile(const std::filesystem::path& path, std::string_view content);

Status MakeDirs(const std::filesystem::path& path);

// $XDG_CACHE_HOME/kforge, else $HOME/.cache/kforge, else /tmp/kforge-cache.
std::filesystem::path DefaultCacheDir();

// Where an installed kforge keeps its data (tasks/, prompts/, include/):
// <the running executable's directory>/../share/kforge, found through
// /proc/self/exe so an installed tree can be moved anywhere. Empty when that
// directory does not exist (a build tree).
std::filesystem::path InstalledDataDir();

// `relative` under InstalledDataDir() when it exists there, else under
// `source_root` (the source tree a build was configured from).
std::filesystem::path DataPath(const std::filesystem::path& relative,
                               const std::filesystem::path& source_root);

// A fresh private directory under $TMPDIR (or /tmp) named prefix-XXXXXX.
Result<std::filesystem::path> MakeTempDir(std::string_view prefix);

}  // namespace kforge
