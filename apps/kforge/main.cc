// kforge: LLMs write multi-GPU CUDA kernels; kforge judges them.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "command.h"
#include "exit_codes.h"
#include "kforge/core/version.h"

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

CLI::Validator NonNegative() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) || v < 0)
          return "expected a number >= 0, not '" + text + "'";
        return "";
      },
      "NONNEGATIVE");
}

namespace {

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// For a flag the parsed subcommand does not have, the nearest one it has
// ("--modles": did you mean --models?).
void SuggestFlags(const CLI::App& app, int argc, char** argv) {
  const auto parsed = app.get_subcommands();
  const CLI::App* cmd = parsed.empty() ? &app : parsed.back();
  while (!cmd->get_subcommands().empty()) cmd = cmd->get_subcommands().back();
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg.size() < 3) continue;
    arg = arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
    bool known = false;
    std::string best;
    size_t best_d = 3;  // suggest within two edits only
    for (const CLI::Option* opt : cmd->get_options()) {
      for (const auto& name : opt->get_lnames()) {
        if (name == arg) known = true;
        const size_t d = EditDistance(arg, name);
        if (d < best_d) best_d = d, best = name;
      }
    }
    if (!known && !best.empty())
      std::fprintf(stderr, "kforge %s: unknown flag --%s; did you mean --%s?\n",
                   cmd->get_name().c_str(), arg.c_str(), best.c_str());
  }
}

// The help's command groups, in the order a new user needs them.
const char* GroupOf(const std::string& command) {
  static const std::map<std::string, const char*> kGroups = {
      {"eval", "Evaluate"},   {"prompt", "Evaluate"}, {"tasks", "Evaluate"},
      {"cache", "Evaluate"},  {"run", "Run"},         {"leaderboard", "Results"},
      {"compare", "Results"}, {"show", "Results"},    {"serve", "Results"},
      {"results", "Results"}, {"ask", "Models"},      {"models", "Models"}};
  auto it = kGroups.find(command);
  return it == kGroups.end() ? "Other" : it->second;
}

constexpr const char* kExamples = R"(Examples:
  kforge tasks list                                   the benchmark's tasks
  kforge eval --task allreduce --kernel k.cu          judge one kernel (exit status: its verdict)
  kforge prompt --task 1 --hardware h200_8            what a model is sent first
  kforge run --models openai:gpt-5.5 --tasks 1,2,3 --name nightly
  kforge run --resume nightly                         continue after a stop or a crash
  kforge leaderboard runs/nightly                     rank models; compare runs with `compare`
  kforge show runs/nightly allreduce --json -         one task's sessions, turn by turn
  kforge models --json models.json                    the registry (+ ~/.config/kforge/models.toml)
)";

int GroupRank(const std::string& command) {
  static const std::vector<std::string> kOrder = {"Evaluate", "Run", "Results", "Models"};
  const auto it = std::find(kOrder.begin(), kOrder.end(), GroupOf(command));
  return static_cast<int>(it - kOrder.begin());
}

// Options whose stored value means "not given" (0, -1, empty) show no
// default; the help text says what then applies.
void HideSentinelDefaults(CLI::App* app) {
  for (CLI::Option* opt : app->get_options()) {
    const std::string d = opt->get_default_str();
    if (d == "0" || d == "-1" || d == "[]" || d == "false") opt->default_str("");
  }
  for (CLI::App* sub : app->get_subcommands({})) HideSentinelDefaults(sub);
}

}  // namespace
}  // namespace kforge::cli

int main(int argc, char** argv) {
  CLI::App app{"kforge: LLM-written multi-GPU CUDA kernels, judged honestly"};
  app.require_subcommand(1);
  app.footer(std::string(kforge::cli::kExamples) + "\n" + kforge::cli::ExitCodeHelp());
  app.set_version_flag("--version", "kforge " + kforge::VersionString());
  // Every option's help shows its default (subcommands inherit this).
  app.option_defaults()->always_capture_default();
  int exit_code = 0;
  // Registered in link order; added in the help's group order.
  std::vector<kforge::cli::CommandEntry> commands = kforge::cli::Commands();
  std::stable_sort(commands.begin(), commands.end(), [](const auto& a, const auto& b) {
    return kforge::cli::GroupRank(a.name) < kforge::cli::GroupRank(b.name);
  });
  for (const auto& entry : commands) entry.add(app, exit_code);
  for (CLI::App* sub : app.get_subcommands({})) {
    sub->footer(kforge::cli::ExitCodeHelp());
    sub->group(kforge::cli::GroupOf(sub->get_name()));
  }
  kforge::cli::HideSentinelDefaults(&app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and succeed; every other parse error is a
    // usage error (64), not CLI11's own 105-115.
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr)
      kforge::cli::SuggestFlags(app, argc, argv);
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
