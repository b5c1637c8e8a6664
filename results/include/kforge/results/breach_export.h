// `kforge show RUN --export-breach N`: one red-team breach (breaches.h) as an
// exploit kernel for the regression suite, tests/adversarial/kernels/
// (docs/integrity.md, "kforge red-teams kforge"). The file is the breaching
// attempt's kernel, byte for byte, under a header in the suite's format that
// says where it came from and an `Expected:` line the fixer must edit: until
// then the suite's header check fails (AdversarialKernels.*).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/results/show.h"
#include "kforge/results/store.h"

namespace kforge::results {

// The word the exported `Expected:` line holds in place of a verdict.
inline constexpr const char* kExpectedPlaceholder = "FIXME";

struct BreachExport {
  std::string run, model, task, strategy, dtype;
  int64_t session_id = 0;
  int turn = 0;  // from 1
  int sample = 0, world = 0;
  std::string verdict;  // as the breach was found
  std::vector<std::string> reasons;
  std::string kernel, kernel_sha;
  std::string file_name;  // redteam_<task>_s<session>_t<turn>.cu
  std::string content;    // the header, one empty line, then `kernel` unchanged
};

// Finds the breach at `turn` (from 1, as `kforge show` prints it) among the
// sessions `select` picks, and builds its file. Errors name what was asked:
// a store without breaches, no breach at that turn (listing the breaches
// there are), several sessions with one there (naming them, for --session),
// a breach whose reply held no kernel (nothing to export).
Result<BreachExport> PrepareBreachExport(const RunStore& store, const ShowOptions& select,
                                         int turn);

// Writes `e.content` to `dir`/`e.file_name` and returns the path. `dir` must
// be a directory; an existing file is never replaced (kInvalidInput naming it).
Result<std::filesystem::path> WriteBreachExport(const BreachExport& e,
                                                const std::filesystem::path& dir);

// The `kforge.breach_export/1` document (`--json`): path, run, session, turn,
// task, model, strategy, sample, world, dtype, verdict, reasons, kernel_sha256.
nlohmann::json BreachExportJson(const BreachExport& e, const std::filesystem::path& path);

}  // namespace kforge::results
