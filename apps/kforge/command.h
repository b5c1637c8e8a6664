// The kforge CLI is a table of subcommands. Each *_commands.cc file registers
// its subcommands with KF_COMMAND; main() builds the CLI11 app from the table.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace kforge::cli {

// Adds one subcommand (and its callback) to the app. The callback must set
// `exit_code` (0 = success) instead of calling exit().
using CommandRegistrar = std::function<void(CLI::App& app, int& exit_code)>;

struct CommandEntry {
  std::string name;
  CommandRegistrar add;
};

bool RegisterCommand(std::string name, CommandRegistrar add);

// A finite number >= 0 (seconds, dollars, tokens). CLI11's NonNegativeNumber
// would answer -3 with its range spelled out to 1.8e308.
CLI::Validator NonNegative();
const std::vector<CommandEntry>& Commands();

}  // namespace kforge::cli

#define KF_COMMAND_CONCAT_INNER_(a, b) a##b
#define KF_COMMAND_CONCAT_(a, b) KF_COMMAND_CONCAT_INNER_(a, b)
#define KF_COMMAND(name, registrar)                                        \
  static const bool KF_COMMAND_CONCAT_(kf_command_registered_, __LINE__) = \
      ::kforge::cli::RegisterCommand(name, registrar)
