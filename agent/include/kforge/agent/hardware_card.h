// The hardware card as the model is told it: a named profile
// (prompts/hardware/*.toml, docs/agent.md) read into the evaluator's typed
// card (kforge/evaluator/hardware.h), and the card rendered for the prompt.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/evaluator/hardware.h"

namespace kforge::agent {

// Reads a profile TOML into a card. Errors name the file, the line and the
// field.
Result<eval::HardwareCard> LoadHardwareProfile(const std::filesystem::path& path);
Result<eval::HardwareCard> ParseHardwareProfile(std::string_view toml_text,
                                                const std::filesystem::path& origin);

// A profile by name (prompts/hardware/NAME.toml) or path.
Result<eval::HardwareCard> FindHardwareProfile(const std::string& name_or_path,
                                               const std::filesystem::path& prompts_dir);
std::vector<std::string> ListHardwareProfiles(const std::filesystem::path& prompts_dir);

// Markdown for the prompt.
std::string RenderHardwareCard(const eval::HardwareCard& card);

}  // namespace kforge::agent
