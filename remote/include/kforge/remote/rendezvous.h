// Rendezvous files: how a coordinator finds evaluation servers it did not
// start itself. A server started with `--register FILE` writes one JSON file
// when it accepts connections and removes it when it drains or exits; a
// launcher (Slurm) points every server at one directory on shared storage,
// named <job>_<array task>.json, so a requeued task rewrites its own file.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::remote {

struct Registration {
  std::string url;  // http://host:port
  std::string host;
  int pid = 0;
  int gpu_slots = 0;
  int compile_slots = 0;
  std::string slurm_job;         // "<job id>" or "<array job>_<task>"; empty outside Slurm
  double registered_at = 0;      // unix seconds
  std::filesystem::path origin;  // the file it was read from (not written)
};

// Writes `reg` as kforge.eval_server_registration/1 JSON through a temporary
// file and rename(2): a reader sees the whole file or none.
Status WriteRegistration(const std::filesystem::path& file, const Registration& reg);
Result<Registration> ReadRegistration(const std::filesystem::path& file);
// Every *.json registration in `dir`, sorted by file name. Files that do not
// parse (a foreign file) are skipped; a missing directory is an empty list.
std::vector<Registration> ReadRegistrations(const std::filesystem::path& dir);

}  // namespace kforge::remote
