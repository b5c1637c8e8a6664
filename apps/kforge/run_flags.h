// `kforge run`'s flags that set RunConfig fields, one option per row of the
// field table (kforge/agent/run_fields.h): which were given (CLI11's count,
// not a sentinel value), which ones a resume or a rejudge refuses (from the
// rows' roles), and their merge over a run file or a stored config.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "kforge/agent/run_config.h"
#include "kforge/agent/run_fields.h"
#include "kforge/core/status.h"

namespace kforge::cli {

class RunFlags {
 public:
  // Adds the options to `cmd`; this object must outlive its parsing.
  void Add(CLI::App* cmd);

  bool Given(const agent::RunField& f) const;
  // The flags given whose rows' role `allowed` refuses, in the table's order
  // ("--budget-*" for any budget flag, "--slurm*" for any Slurm flag).
  std::vector<std::string> GivenBut(bool (*allowed)(agent::FieldRole)) const;

  // Every given flag over `c`: the fields as given; a deadline parsed now;
  // --slurm alone asks for at least one server. `limit_changes`, when not
  // null, gets each deadline or budget changed ("deadline A -> B"), for the log.
  Status ApplyTo(agent::RunConfig* c, std::vector<std::string>* limit_changes) const;

  // The flags' values, RunConfig's defaults where not given.
  const agent::RunConfig& values() const { return values_; }

 private:
  void AddBudgets(CLI::App* cmd, std::vector<CLI::Option*>* opts);
  void AddSlurm(CLI::App* cmd, std::vector<CLI::Option*>* opts);
  Status ApplyLimits(agent::RunConfig* c, std::vector<std::string>* changes) const;
  void ApplySlurm(agent::RunConfig* c) const;

  agent::RunConfig values_;
  std::string deadline_;
  bool slurm_ = false;
  CLI::Option* slurm_nodes_ = nullptr;
  CLI::Option* slurm_gpus_per_node_ = nullptr;
  CLI::Option* slurm_partition_ = nullptr;
  CLI::Option* slurm_time_ = nullptr;
  std::vector<std::vector<CLI::Option*>> options_;  // per row of agent::RunFields()
};

}  // namespace kforge::cli
