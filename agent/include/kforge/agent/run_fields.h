// The fields of a RunConfig, one row each: the run file's key, the stored
// JSON's key, the `kforge run` flag, the kind of value and the role. The run
// file's parser, the stored JSON (both ways), the resume's difference and the
// CLI's flags, refusals and merge are all driven by this table, so a new field
// is a member of RunConfig and a row in agent/src/run_fields.cc
// (RunFields.CoverEveryMemberOnce fails on a member no row covers).
#pragma once

#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kforge/agent/run_config.h"

namespace kforge::agent {

// What a field is to the run. The role alone decides who may change it:
//
//   role         fields                                 resume   rejudge  differences
//   kName        name                                   refuses  takes    -
//   kOut         out                                    takes    takes    -
//   kSelects     models, tasks                          refuses  takes    compared
//   kAsks        strategy, turns, ..., hardware         refuses  refuses  compared
//   kLimits      deadline, budget                       takes    refuses  compared
//   kEvaluates   gpus, compile_only, ..., registry      takes    takes    compared
//   kServers     evaluators, ..., slurm                 takes    takes    -
//   kProvenance  rejudge_of (no flag, no run-file key)  -        -        compared
enum class FieldRole {
  kName,        // a resume is named by --resume; a rejudge may name its new run
  kOut,         // where runs are stored
  kSelects,     // what the run asks of whom; a rejudge's filter of the recorded sessions
  kAsks,        // what every session asks: fixed for the run
  kLimits,      // when model calls stop: a resume may move them; a rejudge calls no model
  kEvaluates,   // how and on what this machine evaluates
  kServers,     // where evaluations run: servers come and go between a run and its resume
  kProvenance,  // what the run was made from
};

// A resume continues the run as it was asked (`kforge run --resume`).
bool AResumeMayChange(FieldRole role);
// A rejudge judges recorded turns again and calls no model (`--rejudge`).
bool ARejudgeTakes(FieldRole role);
// Compared by RunConfigDifferences: what a second run under a taken name asks differently.
bool DifferencesCompare(FieldRole role);

enum class FieldKind {
  kString,
  kPath,         // a string; relative in a run file: to the run file's folder
  kStrings,      // a string or a list of them; the flag: comma-separated
  kUrls,         // kStrings, each an http:// or https:// URL
  kFiles,        // a file or a list, relative to the run file; the flag repeats
  kInt,          // an integer >= min
  kOptionalInt,  // an integer >= min; unset: the strategy's
  kSeconds,      // a finite number of seconds >= 0; `zero` says what 0 means
  kBool,
  kGpus,  // GPU indices; empty: every visible GPU
  // Fields of their own shape, each read and written by its own small function:
  kDeadline,   // a run file's deadline text, stored as unix seconds
  kBudgets,    // [budget] with usd, tokens, wall_s, [budget.per_model], [budget.per_task]
  kSlurm,      // [slurm]: nodes, gpus_per_node, partition, time (slurm_* members)
  kRejudgeOf,  // rejudge_of and rejudge_of_store
};

// Whether the stored JSON has the key.
enum class JsonWhen {
  kRequired,  // always written; a stored config without it is refused
  kAlways,    // always written; missing (an older run): the default
  kWhenSet,   // written when not empty / not unset
};

// The member a row reads and writes; std::monostate for kSlurm and
// kRejudgeOf, which span several members (CopyField knows them).
using FieldMember =
    std::variant<std::monostate, std::string RunConfig::*, std::vector<std::string> RunConfig::*,
                 int RunConfig::*, std::optional<int> RunConfig::*, double RunConfig::*,
                 bool RunConfig::*, std::vector<int> RunConfig::*,
                 std::optional<double> RunConfig::*, Budgets RunConfig::*>;

struct RunField {
  std::string_view key;       // the run file's key; empty: none
  std::string_view json_key;  // the stored JSON's key
  std::string_view flag;      // `kforge run`'s flag ("--budget-*" names a family); empty: none
  FieldRole role;
  FieldKind kind;
  FieldMember member;
  JsonWhen json = JsonWhen::kAlways;
  int min = 0;            // kInt, kOptionalInt
  int flag_max = 0;       // kInt, kOptionalInt: the flag's largest value (a run file has none)
  std::string_view zero;  // kSeconds: what 0 means, as errors say
  // kSeconds: the range a value other than 0 must lie in.
  double seconds_lo = 0;
  double seconds_hi = std::numeric_limits<double>::infinity();
  std::string_view help;  // the flag's help
};

// Whether `v` is a value a kSeconds field takes: finite, >= 0, and 0 or
// within [seconds_lo, seconds_hi]; else what is expected, as errors say.
std::optional<std::string> SecondsRefused(const RunField& f, double v);

// Every field, in the order errors and refusals list them.
std::span<const RunField> RunFields();
const RunField* FindRunField(std::string_view json_key);

// Sets `to`'s field (every member the row spans) to `from`'s.
void CopyField(const RunField& f, const RunConfig& from, RunConfig* to);

}  // namespace kforge::agent
