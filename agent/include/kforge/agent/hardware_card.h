// The hardware card: what the model is told about the machine. It is the JSON
// the evaluator's ProbeHardware returns ({gpus:[...], p2p, nvlink, nccl_version,
// cuda_driver_version, cuda_runtime_version, emulated, world}), either probed
// or built from a named profile in prompts/hardware/*.toml (docs/agent.md).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::agent {

// Reads a profile TOML and expands it to the probe's JSON shape. Errors name
// the file, the line and the field.
Result<nlohmann::json> LoadHardwareProfile(const std::filesystem::path& path);
Result<nlohmann::json> ParseHardwareProfile(std::string_view toml_text,
                                            const std::filesystem::path& origin);

// A profile by name (prompts/hardware/NAME.toml) or path.
Result<nlohmann::json> FindHardwareProfile(const std::string& name_or_path,
                                           const std::filesystem::path& prompts_dir);
std::vector<std::string> ListHardwareProfiles(const std::filesystem::path& prompts_dir);

// The card restricted to the first `world` GPUs (p2p and nvlink trimmed to match).
nlohmann::json TrimHardware(const nlohmann::json& card, int world);

// Markdown for the prompt.
std::string RenderHardwareCard(const nlohmann::json& card);

// The largest NVLink bandwidth (GB/s, one direction) from the first GPU to a
// peer, the figure busbw is compared against; 0 when the card has none.
double LinkPeakGbps(const nlohmann::json& card);

}  // namespace kforge::agent
