// A strategy: how a session talks to a model. Read from a TOML file under
// prompts/strategies/ (format in docs/agent.md); its templates come from
// prompts/templates/ unless the file names others.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kforge/agent/outcome.h"
#include "kforge/core/status.h"

namespace kforge::agent {

// Which earlier candidates the next round refines.
enum class RefineFrom {
  kLast,  // each of the K lineages continues from its own latest candidate
  kBest,  // every new candidate refines the best candidate so far
  kBeam,  // new candidates refine the top `beam` candidates so far, round-robin
};

struct StopRules {
  bool on_correct = false;  // stop at the first correct kernel
  double speedup = 0;       // > 0: stop once a correct kernel reaches this speedup
  int patience = 0;         // > 0: stop after this many rounds without a better candidate
};

struct Strategy {
  std::string name;
  std::string description;
  std::filesystem::path path;  // the file it came from
  int turns = 1;               // rounds
  int samples = 1;             // candidates per round
  RefineFrom refine = RefineFrom::kLast;
  int beam = 1;
  int history = 0;  // > 0: keep only the last N exchanges of a lineage (the first prompt always)
  bool example = false;  // add one of the task's hand-written solutions as an in-context example
  // Red-team the evaluator (docs/integrity.md): the prompt also carries
  // docs/integrity.md and docs/methodology.md, the run plants a canary, and
  // every evaluation is checked for a breach.
  bool redteam = false;
  // Every GPU evaluation also profiles the kernel (EvalOptions::profile, as
  // `kforge eval --profile`), and the slow and fast feedback show what the
  // hardware counters said (docs/agent.md, "Profile").
  bool profile = false;
  StopRules stop;
  std::optional<double> temperature;
  std::optional<int> max_output_tokens;
  std::optional<std::string> reasoning_effort;
  std::string system_template;
  std::string user_template;
  std::map<Outcome, std::string> feedback_templates;  // one per outcome, all present
};

// Parses a strategy. `templates_dir` is where template file names resolve.
// Errors name the file, the line and the field.
Result<Strategy> ParseStrategy(std::string_view toml_text, const std::filesystem::path& origin,
                               const std::filesystem::path& templates_dir);
Result<Strategy> LoadStrategy(const std::filesystem::path& path);

// Where prompts live: $KFORGE_PROMPTS_DIR, else ./prompts, else the source tree's.
std::filesystem::path DefaultPromptsDir();

// Where the docs a red-team prompt carries live: $KFORGE_DOCS_DIR, else the
// installed data's docs/, else the source tree's.
std::filesystem::path DocsDir();

// A strategy by name (prompts/strategies/NAME.toml) or by path (contains '/'
// or ends in .toml).
Result<Strategy> FindStrategy(const std::string& name_or_path,
                              const std::filesystem::path& prompts_dir);

// Names of the strategies under prompts_dir/strategies, sorted.
std::vector<std::string> ListStrategies(const std::filesystem::path& prompts_dir);

}  // namespace kforge::agent
