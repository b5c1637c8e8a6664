#include "run_flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <optional>

#include "command.h"
#include "kforge/core/strings.h"

namespace kforge::cli {
namespace {

using agent::FieldKind;
using agent::RunConfig;
using agent::RunField;

template <class T>
T RunConfig::*Member(const RunField& f) {
  return std::get<T RunConfig::*>(f.member);
}

std::string Dollars(const std::optional<double>& v) {
  return v ? fmt::format("${:g}", *v) : "none";
}
std::string Seconds(const std::optional<double>& v) {
  return v ? fmt::format("{:g} s", *v) : "none";
}
std::string Tokens(const std::optional<int64_t>& v) { return v ? std::to_string(*v) : "none"; }
std::string When(const std::optional<double>& unix_s) {
  if (!unix_s) return "none";
  char buf[32];
  const std::time_t t = static_cast<std::time_t>(*unix_s);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M", std::localtime(&t));
  return buf;
}

}  // namespace

void RunFlags::Add(CLI::App* cmd) {
  const auto fields = agent::RunFields();
  options_.assign(fields.size(), {});
  for (size_t i = 0; i < fields.size(); ++i) {
    const RunField& f = fields[i];
    if (f.flag.empty()) continue;
    const std::string flag(f.flag), help(f.help);
    std::vector<CLI::Option*>& opts = options_[i];
    switch (f.kind) {
      case FieldKind::kString:
      case FieldKind::kPath:
        opts.push_back(cmd->add_option(flag, values_.*Member<std::string>(f), help));
        break;
      case FieldKind::kStrings:
      case FieldKind::kUrls: {
        auto m = Member<std::vector<std::string>>(f);
        opts.push_back(cmd->add_option_function<std::string>(
            flag, [this, m](const std::string& s) { values_.*m = Split(s, ','); }, help));
        break;
      }
      case FieldKind::kFiles:
        opts.push_back(cmd->add_option(flag, values_.*Member<std::vector<std::string>>(f), help));
        break;
      case FieldKind::kInt:
        opts.push_back(cmd->add_option(flag, values_.*Member<int>(f), help)
                           ->check(CLI::Range(f.min, f.flag_max)));
        break;
      case FieldKind::kOptionalInt: {
        auto m = Member<std::optional<int>>(f);
        opts.push_back(cmd->add_option_function<int>(
                              flag, [this, m](const int& v) { values_.*m = v; }, help)
                           ->check(CLI::Range(f.min, f.flag_max)));
        break;
      }
      case FieldKind::kSeconds:
        opts.push_back(
            cmd->add_option(flag, values_.*Member<double>(f), help)
                ->check(NonNegative())
                ->check(CLI::Validator(
                    [&f](std::string& text) -> std::string {
                      return SecondsRefused(f, std::strtod(text.c_str(), nullptr)).value_or("");
                    },
                    "SECONDS")));
        break;
      case FieldKind::kBool:
        opts.push_back(cmd->add_flag(flag, values_.*Member<bool>(f), help));
        break;
      case FieldKind::kGpus:
        opts.push_back(
            cmd->add_option(flag, values_.*Member<std::vector<int>>(f), help)->delimiter(','));
        break;
      case FieldKind::kDeadline:
        opts.push_back(cmd->add_option(flag, deadline_, help));
        break;
      case FieldKind::kBudgets:
        AddBudgets(cmd, &opts);
        break;
      case FieldKind::kSlurm:
        AddSlurm(cmd, &opts);
        break;
      case FieldKind::kRejudgeOf:
        break;
    }
  }
}

// --budget-usd and the other limits of [budget], each into its optional.
void RunFlags::AddBudgets(CLI::App* cmd, std::vector<CLI::Option*>* opts) {
  auto limit = [cmd, opts](const char* name, auto* to, const char* what) {
    using T = typename std::remove_reference_t<decltype(*to)>::value_type;
    opts->push_back(cmd->add_option_function<T>(
                           name, [to](const T& v) { *to = v; }, what)
                        ->check(NonNegative()));
  };
  agent::Budgets& b = values_.budgets;
  limit("--budget-usd", &b.run.usd, "dollars for the whole run, shared evenly by its models");
  limit("--budget-tokens", &b.run.tokens, "tokens for the whole run, shared evenly by its models");
  limit("--budget-wall", &b.run.wall_s, "wall-clock seconds for the whole run");
  limit("--model-budget-usd", &b.per_model.usd, "dollars per model");
  limit("--model-budget-tokens", &b.per_model.tokens, "tokens per model");
  limit("--task-budget-usd", &b.per_task.usd, "dollars per model and task");
}

// --slurm and its options (a run file's [slurm] table).
void RunFlags::AddSlurm(CLI::App* cmd, std::vector<CLI::Option*>* opts) {
  opts->push_back(cmd->add_flag(
      "--slurm", slurm_, "start eval-servers through Slurm for this run and stop them after it"));
  slurm_nodes_ = cmd->add_option("--slurm-nodes", values_.slurm_nodes,
                                 "servers (nodes) for --slurm (default 1)")
                     ->check(CLI::Range(1, 100000));
  slurm_gpus_per_node_ =
      cmd->add_option("--slurm-gpus-per-node", values_.slurm_gpus_per_node,
                      "GPUs per server for --slurm (default: W; 0 with --compile-only)")
          ->check(CLI::Range(0, 64));
  slurm_partition_ =
      cmd->add_option("--slurm-partition", values_.slurm_partition, "Slurm partition for --slurm");
  slurm_time_ = cmd->add_option("--slurm-time", values_.slurm_time,
                                "Slurm time limit for --slurm, e.g. 12:00:00");
  opts->insert(opts->end(), {slurm_nodes_, slurm_gpus_per_node_, slurm_partition_, slurm_time_});
}

bool RunFlags::Given(const RunField& f) const {
  const size_t i = static_cast<size_t>(&f - agent::RunFields().data());
  if (i >= options_.size()) return false;
  return std::any_of(options_[i].begin(), options_[i].end(),
                     [](const CLI::Option* o) { return o->count() > 0; });
}

std::vector<std::string> RunFlags::GivenBut(bool (*allowed)(agent::FieldRole)) const {
  std::vector<std::string> out;
  for (const RunField& f : agent::RunFields()) {
    if (!allowed(f.role) && Given(f)) out.emplace_back(f.flag);
  }
  return out;
}

Status RunFlags::ApplyTo(RunConfig* c, std::vector<std::string>* limit_changes) const {
  for (const RunField& f : agent::RunFields()) {
    if (!Given(f) || f.role == agent::FieldRole::kLimits) continue;
    if (f.kind == FieldKind::kSlurm) {
      ApplySlurm(c);
    } else {
      agent::CopyField(f, values_, c);
    }
  }
  return ApplyLimits(c, limit_changes);
}

// --slurm and its options (a run file's [slurm] table says the same).
void RunFlags::ApplySlurm(RunConfig* c) const {
  if (slurm_nodes_->count()) {
    c->slurm_nodes = values_.slurm_nodes;
  } else if (slurm_) {
    c->slurm_nodes = std::max(1, c->slurm_nodes);
  }
  if (slurm_gpus_per_node_->count()) c->slurm_gpus_per_node = values_.slurm_gpus_per_node;
  if (slurm_partition_->count()) c->slurm_partition = values_.slurm_partition;
  if (slurm_time_->count()) c->slurm_time = values_.slurm_time;
}

// --deadline and the budgets: given ones replace the config's (on a resume,
// the stored ones; they are stored with the run).
Status RunFlags::ApplyLimits(RunConfig* c, std::vector<std::string>* changes) const {
  const RunConfig before = *c;
  auto take = [](const auto& flag, auto& to) {
    if (flag) to = flag;
  };
  const agent::Budgets& given = values_.budgets;
  take(given.run.usd, c->budgets.run.usd);
  take(given.run.tokens, c->budgets.run.tokens);
  take(given.run.wall_s, c->budgets.run.wall_s);
  take(given.per_model.usd, c->budgets.per_model.usd);
  take(given.per_model.tokens, c->budgets.per_model.tokens);
  take(given.per_task.usd, c->budgets.per_task.usd);
  if (!deadline_.empty()) {
    KF_ASSIGN_OR_RETURN(c->deadline_unix,
                        agent::ParseDeadline(deadline_, static_cast<double>(std::time(nullptr))));
  }
  if (!changes) return Status::Ok();
  auto note = [changes](const char* what, const std::string& from, const std::string& to) {
    if (from != to) changes->push_back(fmt::format("{} {} -> {}", what, from, to));
  };
  note("deadline", When(before.deadline_unix), When(c->deadline_unix));
  const auto& b = before.budgets;
  const auto& n = c->budgets;
  note("run budget", Dollars(b.run.usd), Dollars(n.run.usd));
  note("run token budget", Tokens(b.run.tokens), Tokens(n.run.tokens));
  note("run wall-clock budget", Seconds(b.run.wall_s), Seconds(n.run.wall_s));
  note("per-model budget", Dollars(b.per_model.usd), Dollars(n.per_model.usd));
  note("per-model token budget", Tokens(b.per_model.tokens), Tokens(n.per_model.tokens));
  note("per-task budget", Dollars(b.per_task.usd), Dollars(n.per_task.usd));
  return Status::Ok();
}

}  // namespace kforge::cli
