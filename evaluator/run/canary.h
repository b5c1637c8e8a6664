// Internal to the evaluator: the evaluation's canary (EvalOptions::canary,
// kforge/evaluator/canary.h) planted where only the trusted side holds it,
// and what the evaluation reports when a candidate produced it anyway
// (docs/integrity.md, "kforge red-teams kforge"; docs/eval-result.md,
// `integrity.canary`).
//
// Where it is planted (the names `integrity.canary.planted` lists):
//   harness_env   the harness group's environment (kEvalCanaryEnv), and so
//                 its processes' memory and /proc/<pid>/environ; never a
//                 candidate's (WorkerGroup refuses it, the scrub drops it)
//   harness_file  a 0600 file in a fresh 0700 directory of the temporary
//                 folder (kforge-harness-XXXXXX/canary) that the harness
//                 group owns and no candidate's Landlock rules grant
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/evaluator/task.h"
#include "run/canary_scan.h"

namespace kforge::eval {

inline constexpr const char* kPlantedHarnessEnv = "harness_env";
inline constexpr const char* kPlantedHarnessFile = "harness_file";

// The canary's file: made by Plant, removed (with its directory) on
// destruction.
class CanaryFile {
 public:
  // A fresh 0700 directory under `parent` (empty: the system's temporary
  // folder) holding `canary` in a 0600 file named "canary".
  static Result<std::unique_ptr<CanaryFile>> Plant(std::string_view canary,
                                                   const std::filesystem::path& parent = {});
  ~CanaryFile();
  CanaryFile(const CanaryFile&) = delete;
  CanaryFile& operator=(const CanaryFile&) = delete;
  const std::filesystem::path& path() const { return file_; }

 private:
  CanaryFile() = default;
  std::filesystem::path dir_, file_;
};

// Where a candidate's product holds the canary: the rank, and in words
// ("rank 1's output 'y' at byte 4093 (size small, trial 0)").
struct CanaryFound {
  int rank = -1;      // -1: nowhere, or no rank is known
  std::string where;  // empty: nowhere
  bool found() const { return !where.empty(); }
};

// One check call's outputs ([rank][output], raw bytes as read back, in
// `p.outputs` order), each tensor looked at on its own (a token split
// across two tensors is not claimed): the first place the canary is.
CanaryFound CanaryInOutputs(const std::vector<std::string>& needles, const Problem& p,
                            const std::vector<std::vector<std::vector<char>>>& outputs, int trial);

// A sighting in a rank's captured output: "rank 0's stdout/stderr at byte 120".
CanaryFound CanaryInStream(int rank, const CanarySighting& sighting);

// What the candidate's processes reported, as the document will hold it
// ({field, text}: an error a rank sent, the profile's metric names): a
// candidate's code runs in the process that writes its replies, so it can
// put anything there. The first that holds the token's text: "the
// evaluation's `error` (rank 1)" (`rank` >= 0 where it is known).
CanaryFound CanaryInReports(std::string_view token,
                            const std::vector<std::pair<std::string, std::string>>& texts,
                            int rank);

// The integrity finding (it rejects the kernel) for a sighting.
nlohmann::json CanaryFinding(const CanaryFound& found);

// `integrity.canary`: {"planted": [...], "found": where} ("found" only when
// it was).
nlohmann::json CanaryReport(const std::vector<std::string>& planted, const std::string& found);

}  // namespace kforge::eval
