// `--json FILE|-`: the machine-readable form of every command that lists or
// summarises (tasks list, models, show, run). Each document is one JSON
// object whose "schema" names its shape and version ("kforge.tasks/1"); a
// version changes only when a field is removed or changes meaning, so readers
// may ignore fields they do not know. Schemas: docs/cli.md.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "kforge/core/status.h"

namespace kforge::cli {

// Adds `--json FILE|-` to `cmd`, writing to `dest`.
void AddJsonOption(CLI::App* cmd, std::string& dest);

// Writes `doc` (indented, one trailing newline) to `dest`: "-" is stdout,
// anything else a file written atomically, with the mode of any new file
// (0666 less the umask). Errors name the file.
Status WriteJson(const std::string& dest, const nlohmann::json& doc);

}  // namespace kforge::cli
