// A run file (TOML) into a RunConfig, a field at a time by its row's kind
// (run_fields.h). Errors name the file, the line and the field.
#include <fmt/format.h>
#include <toml++/toml.h>

#include <cmath>
#include <ctime>

#include "kforge/agent/run_config.h"
#include "kforge/agent/run_fields.h"
#include "kforge/core/fs.h"

namespace kforge::agent {
namespace {

namespace fs = std::filesystem;

Status FieldError(const fs::path& origin, const toml::node* node, std::string_view field,
                  std::string_view what) {
  int line = node ? static_cast<int>(node->source().begin.line) : 0;
  return Error(ErrorKind::kInvalidInput,
               fmt::format("{}:{}: {}: {}", origin.string(), line, field, what));
}

// A path as the run file means it: relative to the run file's folder.
std::string Beside(const fs::path& origin, const std::string& file) {
  if (file.empty() || fs::path(file).is_absolute()) return file;
  return (origin.parent_path() / file).lexically_normal().string();
}

Result<std::vector<std::string>> Strings(const fs::path& origin, const toml::node& n,
                                         std::string_view key, const char* one_bad,
                                         const char* all_bad) {
  if (auto s = n.value<std::string>()) return std::vector<std::string>{*s};
  const toml::array* a = n.as_array();
  if (!a) return FieldError(origin, &n, key, all_bad);
  std::vector<std::string> out;
  for (const auto& v : *a) {
    auto s = v.value<std::string>();
    if (!s) return FieldError(origin, &v, key, one_bad);
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

// [budget]: the run's limits, and [budget.per_model] and [budget.per_task].
Status ReadBudgets(const fs::path& origin, const toml::node& n, Budgets* out) {
  const toml::table* b = n.as_table();
  if (!b) return FieldError(origin, &n, "budget", "expected a table");
  for (const auto& [k, v] : *b) {
    std::string key(k.str());
    if (key == "per_model") {
      KF_RETURN_IF_ERROR(ReadLimits(origin, &v, "budget.per_model", &out->per_model));
    } else if (key == "per_task") {
      KF_RETURN_IF_ERROR(ReadLimits(origin, &v, "budget.per_task", &out->per_task));
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
    Status st = ReadLimits(origin, &one, "budget", &out->run);
    if (!st.ok())
      return FieldError(origin, v, std::string("budget.") + key, "expected a non-negative number");
  }
  return Status::Ok();
}

// [slurm]: eval-servers started through Slurm; the table alone means one.
Status ReadSlurm(const fs::path& origin, const toml::node& n, RunConfig* c) {
  const toml::table* t = n.as_table();
  if (!t) return FieldError(origin, &n, "slurm", "expected a table");
  for (const auto& [k, v] : *t) {
    const std::string key(k.str());
    const std::string field = "slurm." + key;
    if (key == "nodes" || key == "gpus_per_node") {
      auto i = v.value<int64_t>();
      if (!i || *i < 1 || *i > 100000)
        return FieldError(origin, &v, field, "expected an integer >= 1");
      (key == "nodes" ? c->slurm_nodes : c->slurm_gpus_per_node) = static_cast<int>(*i);
    } else if (key == "partition" || key == "time") {
      auto str_value = v.value<std::string>();
      if (!str_value) return FieldError(origin, &v, field, "expected a string");
      (key == "partition" ? c->slurm_partition : c->slurm_time) = *str_value;
    } else {
      return FieldError(origin, &v, field, "unknown field (nodes, gpus_per_node, partition, time)");
    }
  }
  if (c->slurm_nodes == 0) c->slurm_nodes = 1;
  return Status::Ok();
}

template <class T>
T& At(const RunField& f, RunConfig* c) {
  return c->*std::get<T RunConfig::*>(f.member);
}

// One field from its node, by its row's kind.
Status ReadField(const fs::path& origin, const RunField& f, const toml::node& n, RunConfig* c) {
  auto error = [&](std::string_view what) { return FieldError(origin, &n, f.key, what); };
  switch (f.kind) {
    case FieldKind::kString:
    case FieldKind::kPath: {
      auto v = n.value<std::string>();
      if (!v) return error("expected a string");
      At<std::string>(f, c) = f.kind == FieldKind::kPath ? Beside(origin, *v) : *v;
      return Status::Ok();
    }
    case FieldKind::kStrings:
    case FieldKind::kUrls: {
      auto& out = At<std::vector<std::string>>(f, c);
      KF_ASSIGN_OR_RETURN(out, Strings(origin, n, f.key, "expected a list of strings",
                                       "expected a string or a list of strings"));
      for (const auto& url : out) {
        if (f.kind == FieldKind::kUrls && url.rfind("http://", 0) != 0 &&
            url.rfind("https://", 0) != 0)
          return error(fmt::format("'{}' is not an http:// or https:// URL", url));
      }
      return Status::Ok();
    }
    case FieldKind::kFiles: {
      KF_ASSIGN_OR_RETURN(std::vector<std::string> files,
                          Strings(origin, n, f.key, "expected file names",
                                  "expected a file name or a list of them"));
      auto& out = At<std::vector<std::string>>(f, c);
      for (const auto& file : files) out.push_back(Beside(origin, file));
      return Status::Ok();
    }
    case FieldKind::kInt:
    case FieldKind::kOptionalInt: {
      auto v = n.value<int64_t>();
      if (!v || *v < f.min) return error(fmt::format("expected an integer >= {}", f.min));
      if (f.kind == FieldKind::kInt) {
        At<int>(f, c) = static_cast<int>(*v);
      } else {
        At<std::optional<int>>(f, c) = static_cast<int>(*v);
      }
      return Status::Ok();
    }
    case FieldKind::kSeconds: {
      auto v = n.value<double>();
      if (!v) return error(*SecondsRefused(f, -1));
      if (auto refused = SecondsRefused(f, *v)) return error(*refused);
      At<double>(f, c) = *v;
      return Status::Ok();
    }
    case FieldKind::kBool: {
      auto v = n.value<bool>();
      if (!v) return error("expected true or false");
      At<bool>(f, c) = *v;
      return Status::Ok();
    }
    case FieldKind::kGpus: {
      const toml::array* a = n.as_array();
      if (!a) return error("expected a list of GPU indices");
      for (const auto& v : *a) {
        auto i = v.value<int64_t>();
        if (!i || *i < 0) return FieldError(origin, &v, f.key, "expected non-negative integers");
        At<std::vector<int>>(f, c).push_back(static_cast<int>(*i));
      }
      return Status::Ok();
    }
    case FieldKind::kDeadline: {
      auto v = n.value<std::string>();
      if (!v) return error("expected a string");
      auto d = ParseDeadline(*v, static_cast<double>(std::time(nullptr)));
      if (!d.ok()) return error(d.status().message());
      At<std::optional<double>>(f, c) = *d;
      return Status::Ok();
    }
    case FieldKind::kBudgets:
      return ReadBudgets(origin, n, &At<Budgets>(f, c));
    case FieldKind::kSlurm:
      return ReadSlurm(origin, n, c);
    case FieldKind::kRejudgeOf:
      break;  // no run-file key
  }
  return error("unknown field");
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
  auto known = [](std::string_view key) {
    for (const RunField& f : RunFields()) {
      if (!f.key.empty() && f.key == key) return true;
    }
    return false;
  };
  for (const auto& [k, v] : root) {
    if (!known(k.str())) return FieldError(origin, &v, k.str(), "unknown field");
  }
  RunConfig c;
  c.name = origin.stem().string();
  for (const RunField& f : RunFields()) {
    if (f.key.empty()) continue;
    if (const toml::node* n = root.get(f.key)) KF_RETURN_IF_ERROR(ReadField(origin, f, *n, &c));
  }
  if (c.models.empty())
    return FieldError(origin, root.get("models"), "models", "at least one model is required");
  if (c.tasks.empty())
    return FieldError(origin, root.get("tasks"), "tasks", "at least one task selector is required");
  return c;
}

Result<RunConfig> LoadRunFile(const fs::path& path) {
  KF_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseRunFile(text, path);
}

}  // namespace kforge::agent
