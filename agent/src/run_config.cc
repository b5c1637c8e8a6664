#include "kforge/agent/run_config.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <set>

#include "kforge/core/fs.h"

namespace kforge::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

Status FieldError(const fs::path& origin, const toml::node* node, std::string_view field,
                  std::string_view what) {
  int line = node ? static_cast<int>(node->source().begin.line) : 0;
  return Error(ErrorKind::kInvalidInput,
               fmt::format("{}:{}: {}: {}", origin.string(), line, field, what));
}

Result<std::vector<std::string>> Strings(const fs::path& origin, const toml::table& t,
                                         const char* key) {
  std::vector<std::string> out;
  const toml::node* n = t.get(key);
  if (!n) return out;
  if (auto s = n->value<std::string>()) return std::vector<std::string>{*s};
  const toml::array* a = n->as_array();
  if (!a) return FieldError(origin, n, key, "expected a string or a list of strings");
  for (const auto& v : *a) {
    auto s = v.value<std::string>();
    if (!s) return FieldError(origin, &v, key, "expected a list of strings");
    out.push_back(*s);
  }
  return out;
}

Status ReadLimits(const fs::path& origin, const toml::node* n, const std::string& field,
                  BudgetLimits* out) {
  if (!n) return Status::Ok();
  const toml::table* t = n->as_table();
  if (!t) return FieldError(origin, n, field, "expected a table");
  for (const auto& [k, v] : *t) {
    std::string key(k.str());
    if (key == "usd" || key == "wall_s") {
      auto d = v.value<double>();
      if (!d || *d < 0)
        return FieldError(origin, &v, field + "." + key, "expected a non-negative number");
      (key == "usd" ? out->usd : out->wall_s) = *d;
    } else if (key == "tokens") {
      auto i = v.value<int64_t>();
      if (!i || *i < 0)
        return FieldError(origin, &v, field + "." + key, "expected a non-negative integer");
      out->tokens = *i;
    } else {
      return FieldError(origin, &v, field + "." + key, "unknown field (usd, tokens, wall_s)");
    }
  }
  return Status::Ok();
}

json LimitsJson(const BudgetLimits& l) {
  json j = json::object();
  if (l.usd) j["usd"] = *l.usd;
  if (l.tokens) j["tokens"] = *l.tokens;
  if (l.wall_s) j["wall_s"] = *l.wall_s;
  return j;
}

BudgetLimits LimitsFrom(const json& j) {
  BudgetLimits l;
  if (j.contains("usd")) l.usd = j["usd"].get<double>();
  if (j.contains("tokens")) l.tokens = j["tokens"].get<int64_t>();
  if (j.contains("wall_s")) l.wall_s = j["wall_s"].get<double>();
  return l;
}

}  // namespace

Result<RunConfig> ParseRunFile(std::string_view text, const fs::path& origin) {
  toml::table root;
  try {
    root = toml::parse(text, origin.string());
  } catch (const toml::parse_error& e) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{}:{}: {}", origin.string(), e.source().begin.line,
                             std::string(e.description())));
  }
  static const std::set<std::string> kKnown = {"name",
                                               "models",
                                               "tasks",
                                               "strategy",
                                               "turns",
                                               "samples",
                                               "repeats",
                                               "world",
                                               "dtype",
                                               "gpus",
                                               "hardware",
                                               "compile_only",
                                               "deadline",
                                               "llm_concurrency",
                                               "compile_jobs",
                                               "out",
                                               "budget",
                                               "tasks_dir",
                                               "registry",
                                               "evaluators",
                                               "evaluators_dir",
                                               "eval_token_file",
                                               "slurm",
                                               "baseline_reuse_s",
                                               "evaluator_liveness_s"};
  for (const auto& [k, v] : root) {
    if (!kKnown.count(std::string(k.str())))
      return FieldError(origin, &v, k.str(), "unknown field");
  }
  RunConfig c;
  c.name = root["name"].value_or(origin.stem().string());
  KF_ASSIGN_OR_RETURN(c.models, Strings(origin, root, "models"));
  KF_ASSIGN_OR_RETURN(c.tasks, Strings(origin, root, "tasks"));
  if (c.models.empty())
    return FieldError(origin, root.get("models"), "models", "at least one model is required");
  if (c.tasks.empty())
    return FieldError(origin, root.get("tasks"), "tasks", "at least one task selector is required");
  auto str = [&](const char* key, std::string* out) -> Status {
    if (const toml::node* n = root.get(key)) {
      auto v = n->value<std::string>();
      if (!v) return FieldError(origin, n, key, "expected a string");
      *out = *v;
    }
    return Status::Ok();
  };
  auto integer = [&](const char* key, int min, int* out) -> Status {
    if (const toml::node* n = root.get(key)) {
      auto v = n->value<int64_t>();
      if (!v || *v < min)
        return FieldError(origin, n, key, fmt::format("expected an integer >= {}", min));
      *out = static_cast<int>(*v);
    }
    return Status::Ok();
  };
  KF_RETURN_IF_ERROR(str("strategy", &c.strategy));
  KF_RETURN_IF_ERROR(str("dtype", &c.dtype));
  KF_RETURN_IF_ERROR(str("hardware", &c.hardware));
  KF_RETURN_IF_ERROR(str("out", &c.out));
  KF_RETURN_IF_ERROR(str("tasks_dir", &c.tasks_dir));
  int turns = 0, samples = 0;
  KF_RETURN_IF_ERROR(integer("turns", 1, &turns));
  KF_RETURN_IF_ERROR(integer("samples", 1, &samples));
  if (turns) c.turns = turns;
  if (samples) c.samples = samples;
  KF_RETURN_IF_ERROR(integer("repeats", 1, &c.repeats));
  KF_RETURN_IF_ERROR(integer("world", 1, &c.world));
  KF_RETURN_IF_ERROR(integer("llm_concurrency", 1, &c.llm_concurrency));
  KF_RETURN_IF_ERROR(integer("compile_jobs", 0, &c.compile_jobs));
  auto seconds = [&](const char* key, const char* zero, double* out) -> Status {
    if (const toml::node* n = root.get(key)) {
      auto v = n->value<double>();
      if (!v || !(*v >= 0) || !std::isfinite(*v))
        return FieldError(origin, n, key,
                          fmt::format("expected a number of seconds >= 0 (0: {})", zero));
      *out = *v;
    }
    return Status::Ok();
  };
  KF_RETURN_IF_ERROR(
      seconds("baseline_reuse_s", "timed around every candidate", &c.baseline_reuse_s));
  KF_RETURN_IF_ERROR(seconds("evaluator_liveness_s", "no health checks", &c.evaluator_liveness_s));
  if (const toml::node* n = root.get("compile_only")) {
    auto v = n->value<bool>();
    if (!v) return FieldError(origin, n, "compile_only", "expected true or false");
    c.compile_only = *v;
  }
  if (const toml::node* n = root.get("gpus")) {
    const toml::array* a = n->as_array();
    if (!a) return FieldError(origin, n, "gpus", "expected a list of GPU indices");
    for (const auto& v : *a) {
      auto i = v.value<int64_t>();
      if (!i || *i < 0) return FieldError(origin, &v, "gpus", "expected non-negative integers");
      c.gpus.push_back(static_cast<int>(*i));
    }
  }
  if (const toml::node* n = root.get("registry")) {
    // One file or a list; relative paths are relative to the run file.
    std::vector<std::string> files;
    if (auto one = n->value<std::string>()) {
      files.push_back(*one);
    } else if (const toml::array* a = n->as_array()) {
      for (const auto& v : *a) {
        auto f = v.value<std::string>();
        if (!f) return FieldError(origin, &v, "registry", "expected file names");
        files.push_back(*f);
      }
    } else {
      return FieldError(origin, n, "registry", "expected a file name or a list of them");
    }
    for (const auto& f : files) {
      const fs::path path = fs::path(f).is_absolute() ? fs::path(f) : origin.parent_path() / f;
      c.registries.push_back(path.lexically_normal().string());
    }
  }
  KF_ASSIGN_OR_RETURN(c.evaluators, Strings(origin, root, "evaluators"));
  for (const auto& url : c.evaluators) {
    if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0)
      return FieldError(origin, root.get("evaluators"), "evaluators",
                        fmt::format("'{}' is not an http:// or https:// URL", url));
  }
  KF_RETURN_IF_ERROR(str("evaluators_dir", &c.evaluators_dir));
  KF_RETURN_IF_ERROR(str("eval_token_file", &c.eval_token_file));
  for (std::string* rel : {&c.evaluators_dir, &c.eval_token_file}) {
    // Relative to the run file, like registry files.
    if (!rel->empty() && !fs::path(*rel).is_absolute())
      *rel = (origin.parent_path() / *rel).lexically_normal().string();
  }
  if (const toml::node* n = root.get("slurm")) {
    const toml::table* t = n->as_table();
    if (!t) return FieldError(origin, n, "slurm", "expected a table");
    for (const auto& [k, v] : *t) {
      const std::string key(k.str());
      const std::string field = "slurm." + key;
      if (key == "nodes" || key == "gpus_per_node") {
        auto i = v.value<int64_t>();
        if (!i || *i < 1 || *i > 100000)
          return FieldError(origin, &v, field, "expected an integer >= 1");
        (key == "nodes" ? c.slurm_nodes : c.slurm_gpus_per_node) = static_cast<int>(*i);
      } else if (key == "partition" || key == "time") {
        auto str_value = v.value<std::string>();
        if (!str_value) return FieldError(origin, &v, field, "expected a string");
        (key == "partition" ? c.slurm_partition : c.slurm_time) = *str_value;
      } else {
        return FieldError(origin, &v, field,
                          "unknown field (nodes, gpus_per_node, partition, time)");
      }
    }
    if (c.slurm_nodes == 0) c.slurm_nodes = 1;
  }
  if (const toml::node* n = root.get("deadline")) {
    auto v = n->value<std::string>();
    if (!v) return FieldError(origin, n, "deadline", "expected a string");
    auto d = ParseDeadline(*v, static_cast<double>(std::time(nullptr)));
    if (!d.ok()) return FieldError(origin, n, "deadline", d.status().message());
    c.deadline_unix = *d;
  }
  if (const toml::node* n = root.get("budget")) {
    const toml::table* b = n->as_table();
    if (!b) return FieldError(origin, n, "budget", "expected a table");
    for (const auto& [k, v] : *b) {
      std::string key(k.str());
      if (key == "per_model") {
        KF_RETURN_IF_ERROR(ReadLimits(origin, &v, "budget.per_model", &c.budgets.per_model));
      } else if (key == "per_task") {
        KF_RETURN_IF_ERROR(ReadLimits(origin, &v, "budget.per_task", &c.budgets.per_task));
      } else if (key != "usd" && key != "tokens" && key != "wall_s") {
        return FieldError(origin, &v, "budget." + key,
                          "unknown field (usd, tokens, wall_s, per_model, per_task)");
      }
    }
    for (const char* key : {"usd", "tokens", "wall_s"}) {
      const toml::node* v = b->get(key);
      if (!v) continue;
      toml::table one;
      one.insert(key, *v);
      Status st = ReadLimits(origin, &one, "budget", &c.budgets.run);
      if (!st.ok())
        return FieldError(origin, v, std::string("budget.") + key,
                          "expected a non-negative number");
    }
  }
  return c;
}

Result<RunConfig> LoadRunFile(const fs::path& path) {
  KF_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseRunFile(text, path);
}

json RunConfigToJson(const RunConfig& c) {
  json j = {{"name", c.name},
            {"models", c.models},
            {"tasks", c.tasks},
            {"strategy", c.strategy},
            {"repeats", c.repeats},
            {"world", c.world},
            {"dtype", c.dtype},
            {"gpus", c.gpus},
            {"hardware", c.hardware},
            {"compile_only", c.compile_only},
            {"llm_concurrency", c.llm_concurrency},
            {"compile_jobs", c.compile_jobs},
            {"baseline_reuse_s", c.baseline_reuse_s},
            {"out", c.out},
            {"tasks_dir", c.tasks_dir}};
  if (c.turns) j["turns"] = *c.turns;
  if (c.samples) j["samples"] = *c.samples;
  if (c.deadline_unix) j["deadline_unix"] = *c.deadline_unix;
  if (!c.registries.empty()) j["registries"] = c.registries;
  // The token itself is never stored: only where it was read from.
  if (!c.evaluators.empty()) j["evaluators"] = c.evaluators;
  if (!c.evaluators_dir.empty()) j["evaluators_dir"] = c.evaluators_dir;
  if (!c.eval_token_file.empty()) j["eval_token_file"] = c.eval_token_file;
  j["evaluator_liveness_s"] = c.evaluator_liveness_s;
  if (c.slurm_nodes > 0) {
    j["slurm"] = {{"nodes", c.slurm_nodes},
                  {"gpus_per_node", c.slurm_gpus_per_node},
                  {"partition", c.slurm_partition},
                  {"time", c.slurm_time}};
  }
  if (!c.rejudge_of.empty())
    j["rejudge_of"] = {{"run", c.rejudge_of}, {"store", c.rejudge_of_store}};
  j["budget"] = {{"run", LimitsJson(c.budgets.run)},
                 {"per_model", LimitsJson(c.budgets.per_model)},
                 {"per_task", LimitsJson(c.budgets.per_task)}};
  return j;
}

Result<RunConfig> RunConfigFromJson(const json& j) {
  try {
    RunConfig c;
    c.name = j.at("name").get<std::string>();
    c.models = j.at("models").get<std::vector<std::string>>();
    c.tasks = j.at("tasks").get<std::vector<std::string>>();
    c.strategy = j.at("strategy").get<std::string>();
    c.repeats = j.value("repeats", 1);
    c.world = j.value("world", 2);
    c.dtype = j.value("dtype", "");
    c.gpus = j.value("gpus", std::vector<int>{});
    c.hardware = j.value("hardware", "");
    c.compile_only = j.value("compile_only", false);
    c.llm_concurrency = j.value("llm_concurrency", 4);
    c.compile_jobs = j.value("compile_jobs", 0);
    c.baseline_reuse_s = j.value("baseline_reuse_s", eval::kDefaultBaselineReuseS);
    c.out = j.value("out", "runs");
    c.tasks_dir = j.value("tasks_dir", "");
    if (j.contains("turns")) c.turns = j["turns"].get<int>();
    if (j.contains("samples")) c.samples = j["samples"].get<int>();
    if (j.contains("deadline_unix")) c.deadline_unix = j["deadline_unix"].get<double>();
    c.registries = j.value("registries", std::vector<std::string>{});
    c.evaluators = j.value("evaluators", std::vector<std::string>{});
    c.evaluators_dir = j.value("evaluators_dir", "");
    c.eval_token_file = j.value("eval_token_file", "");
    c.evaluator_liveness_s = j.value("evaluator_liveness_s", eval::kDefaultEvaluatorLivenessS);
    if (j.contains("slurm")) {
      const json& sl = j["slurm"];
      c.slurm_nodes = sl.value("nodes", 0);
      c.slurm_gpus_per_node = sl.value("gpus_per_node", 0);
      c.slurm_partition = sl.value("partition", "");
      c.slurm_time = sl.value("time", "");
    }
    if (j.contains("rejudge_of")) {
      c.rejudge_of = j["rejudge_of"].value("run", "");
      c.rejudge_of_store = j["rejudge_of"].value("store", "");
    }
    if (j.contains("budget")) {
      c.budgets.run = LimitsFrom(j["budget"].value("run", json::object()));
      c.budgets.per_model = LimitsFrom(j["budget"].value("per_model", json::object()));
      c.budgets.per_task = LimitsFrom(j["budget"].value("per_task", json::object()));
    }
    return c;
  } catch (const json::exception& e) {
    return Error(ErrorKind::kInvalidInput, fmt::format("stored run config: {}", e.what()));
  }
}

std::vector<std::string> RunConfigDifferences(const RunConfig& stored, const RunConfig& asked) {
  json a = RunConfigToJson(stored), b = RunConfigToJson(asked);
  std::set<std::string> keys;
  for (const auto& [k, v] : a.items()) keys.insert(k);
  for (const auto& [k, v] : b.items()) keys.insert(k);
  std::vector<std::string> out;
  for (const auto& k : keys) {
    // Where evaluations run is not what the run asks: servers come and go
    // between a run and its resume.
    if (k == "name" || k == "out" || k == "evaluators" || k == "evaluators_dir" ||
        k == "eval_token_file" || k == "evaluator_liveness_s" || k == "slurm")
      continue;
    const json va = a.value(k, json()), vb = b.value(k, json());
    if (va != vb) out.push_back(fmt::format("{}: {} -> {}", k, va.dump(), vb.dump()));
  }
  return out;
}

}  // namespace kforge::agent
