// kforge: LLMs write multi-GPU CUDA kernels; kforge judges them.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "command.h"
#include "exit_codes.h"

namespace kforge::cli {

bool RegisterCommand(std::string name, CommandRegistrar add) {
  auto& table = const_cast<std::vector<CommandEntry>&>(Commands());
  table.push_back({std::move(name), std::move(add)});
  return true;
}

const std::vector<CommandEntry>& Commands() {
  static std::vector<CommandEntry> table;
  return table;
}

}  // namespace kforge::cli

int main(int argc, char** argv) {
  CLI::App app{"kforge: LLM-written multi-GPU CUDA kernels, judged honestly"};
  app.require_subcommand(1);
  app.footer(kforge::cli::ExitCodeHelp());
  app.set_version_flag("--version", "kforge 0.1.0");
  int exit_code = 0;
  for (const auto& entry : kforge::cli::Commands()) entry.add(app, exit_code);
  for (CLI::App* sub : app.get_subcommands({})) sub->footer(kforge::cli::ExitCodeHelp());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and succeed; every other parse error is a
    // usage error (64), not CLI11's own 105-115.
    const int cli11 = app.exit(e);
    return cli11 == 0 ? kforge::cli::kExitOk : kforge::cli::kExitUsage;
  } catch (const std::exception& e) {
    // Errors are values inside kforge; an exception reaching here is a bug.
    // Say so plainly instead of aborting (the run store stays consistent: every
    // step is committed before the next begins).
    std::fprintf(stderr, "kforge: internal error: %s\n", e.what());
    return kforge::cli::kExitInternal;
  }
  return exit_code;
}
