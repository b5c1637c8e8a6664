// A RunConfig as the JSON stored with its run, and back, and what two of
// them ask differently: a field at a time by its row (run_fields.h).
#include "kforge/agent/run_config.h"

#include <fmt/format.h>

#include <set>

#include "kforge/agent/run_fields.h"

namespace kforge::agent {
namespace {

using nlohmann::json;

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

template <class T>
bool Unset(const T& v) {
  if constexpr (requires { v.empty(); }) {
    return v.empty();
  } else if constexpr (requires { v.has_value(); }) {
    return !v.has_value();
  } else {
    return false;
  }
}

template <class T>
json ToJson(const T& v) {
  if constexpr (requires { v.has_value(); }) {
    return v ? json(*v) : json(nullptr);
  } else {
    return json(v);
  }
}

template <class T>
void FromJson(const json& v, T* out) {
  if constexpr (requires { out->has_value(); }) {
    *out = v.get<typename T::value_type>();
  } else {
    *out = v.get<T>();
  }
}

void WriteField(const RunField& f, const RunConfig& c, json* j) {
  const std::string key(f.json_key);
  switch (f.kind) {
    case FieldKind::kBudgets:
      (*j)[key] = {{"run", LimitsJson(c.budgets.run)},
                   {"per_model", LimitsJson(c.budgets.per_model)},
                   {"per_task", LimitsJson(c.budgets.per_task)}};
      return;
    case FieldKind::kSlurm:
      if (c.slurm_nodes > 0) {
        (*j)[key] = {{"nodes", c.slurm_nodes},
                     {"gpus_per_node", c.slurm_gpus_per_node},
                     {"partition", c.slurm_partition},
                     {"time", c.slurm_time}};
      }
      return;
    case FieldKind::kRejudgeOf:
      if (!c.rejudge_of.empty()) (*j)[key] = {{"run", c.rejudge_of}, {"store", c.rejudge_of_store}};
      return;
    default:
      std::visit(
          [&](auto m) {
            if constexpr (!std::is_same_v<decltype(m), std::monostate> &&
                          !std::is_same_v<decltype(m), Budgets RunConfig::*>) {
              if (f.json == JsonWhen::kWhenSet && Unset(c.*m)) return;
              (*j)[key] = ToJson(c.*m);
            }
          },
          f.member);
  }
}

// Throws json::exception on a missing required key or a value of another type.
void ReadField(const RunField& f, const json& j, RunConfig* c) {
  const std::string key(f.json_key);
  if (f.json != JsonWhen::kRequired && !j.contains(key)) return;
  const json& v = j.at(key);
  switch (f.kind) {
    case FieldKind::kBudgets:
      c->budgets.run = LimitsFrom(v.value("run", json::object()));
      c->budgets.per_model = LimitsFrom(v.value("per_model", json::object()));
      c->budgets.per_task = LimitsFrom(v.value("per_task", json::object()));
      return;
    case FieldKind::kSlurm:
      c->slurm_nodes = v.value("nodes", 0);
      c->slurm_gpus_per_node = v.value("gpus_per_node", 0);
      c->slurm_partition = v.value("partition", "");
      c->slurm_time = v.value("time", "");
      return;
    case FieldKind::kRejudgeOf:
      c->rejudge_of = v.value("run", "");
      c->rejudge_of_store = v.value("store", "");
      return;
    default:
      std::visit(
          [&](auto m) {
            if constexpr (!std::is_same_v<decltype(m), std::monostate> &&
                          !std::is_same_v<decltype(m), Budgets RunConfig::*>) {
              FromJson(v, &(c->*m));
            }
          },
          f.member);
  }
}

}  // namespace

json RunConfigToJson(const RunConfig& c) {
  json j = json::object();
  for (const RunField& f : RunFields()) WriteField(f, c, &j);
  return j;
}

Result<RunConfig> RunConfigFromJson(const json& j) {
  try {
    RunConfig c;
    for (const RunField& f : RunFields()) ReadField(f, j, &c);
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
    const RunField* f = FindRunField(k);
    if (f && !DifferencesCompare(f->role)) continue;
    const json va = a.value(k, json()), vb = b.value(k, json());
    if (va != vb) out.push_back(fmt::format("{}: {} -> {}", k, va.dump(), vb.dump()));
  }
  return out;
}

}  // namespace kforge::agent
