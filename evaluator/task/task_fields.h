// The parts of task.toml that stand alone: tolerances, input inits and
// distributions, [[groups]] and [floor]. Internal to the task loader; errors
// name the file, the line and the field like every other loader error.
#pragma once

#include <toml++/toml.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/evaluator/task.h"
#include "toml_fields.h"

namespace kforge::eval::internal {

// Where an expression sits, so that a size that leaves one of its variables
// unbound is reported at the expression's line.
struct ExprSite {
  std::string field;
  int line;
  std::string expr;
  bool per_rank = false;  // a shape dimension: may read `rank`
};
using ExprSites = std::vector<ExprSite>;

// { atol = ..., rtol = ... }: numbers or expressions (e.g. "2^-8 * (W - 1)").
Result<ToleranceSpec> LoadTolerance(const TomlFields& f, const toml::node& n,
                                    const std::string& field);
// init = { kind = ..., ... }; int bounds are expressions, recorded in `sink`.
Status LoadInit(const TomlFields& f, const toml::node& n, const std::string& field, InitSpec& init,
                ExprSites& sink);
// replicated / same_on_all_ranks / shard of an input table; `groups` are the task's [[groups]].
Status LoadDistribution(const TomlFields& f, const toml::table& t, const std::string& prefix,
                        const std::vector<GroupSpec>& groups, TensorSpec& spec);
Status LoadGroups(const TomlFields& f, const toml::table& root, std::vector<GroupSpec>& groups,
                  ExprSites& sink);
Status LoadFloor(const TomlFields& f, const toml::table& root, FloorSpec& floor, ExprSites& sink);
// [expert]: kernel (a .cu file inside the task folder `dir`) with its
// technique, or none = "why there is no expert kernel".
Status LoadExpert(const TomlFields& f, const toml::table& root, const std::filesystem::path& dir,
                  std::optional<ExpertSpec>& expert);
// Every output's `count` names another output that is an integer scalar
// (dtype i32 or i64, shape ["1"]) and counts nothing itself; the counted
// output has a first dimension. `lines` maps "outputs[i].count" to its line.
Status CheckCountedOutputs(const TomlFields& f, const std::map<std::string, int>& lines,
                           const std::vector<TensorSpec>& outputs);

}  // namespace kforge::eval::internal
