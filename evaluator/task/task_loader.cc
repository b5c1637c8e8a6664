// task.toml → Task (docs/tasks.md is the format's authority). Parsing is
// strict: unknown fields, wrong types and unbound variables are errors that
// name the file, the line and the field, so that a typo never passes silently.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <set>

#include "kforge/abi_limits.h"
#include "kforge/core/fs.h"
#include "kforge/evaluator/task.h"
#include "task/expr.h"
#include "task/task_key.h"
#include "task_fields.h"
#include "toml_fields.h"

namespace kforge::eval {
namespace {

namespace fs = std::filesystem;
using internal::ExprSite;
using internal::ExprSites;
using internal::Index;
using internal::IsTaskName;
using internal::Join;
using internal::LoadDistribution;
using internal::LoadFloor;
using internal::LoadGroups;
using internal::LoadInit;
using internal::LoadTolerance;
using internal::SplitKey;
using internal::TomlFields;
using internal::TypeName;

constexpr int kMaxWorld = KF_MAX_RANKS;
constexpr size_t kMaxTensors = KF_MAX_TENSORS;
constexpr size_t kMaxDims = KF_MAX_DIMS;
constexpr size_t kMaxParams = KF_MAX_PARAMS;

// Variables every expression may read; no param or size variable may take these names.
bool IsReserved(std::string_view s) { return s == "W" || s == "elem" || s == "rank"; }

bool IsIdentifier(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

class Loader {
 public:
  Loader(const fs::path& dir, std::string file, const toml::table& root)
      : dir_(dir), f_(std::move(file)), root_(root) {}

  Result<Task> Load() {
    KF_RETURN_IF_ERROR(
        f_.CheckKeys(root_, "",
                     {"id", "name", "title", "category", "provenance", "description", "world_sizes",
                      "dtypes", "params", "groups", "inputs", "outputs", "tolerance", "sizes",
                      "perf", "floor", "expert", "policy", "workspace"}));
    KF_RETURN_IF_ERROR(LoadHeader());
    KF_RETURN_IF_ERROR(LoadWorldSizes());
    KF_RETURN_IF_ERROR(LoadDtypes());
    KF_RETURN_IF_ERROR(LoadParams());
    KF_RETURN_IF_ERROR(LoadGroups(f_, root_, task_.groups, exprs_));
    KF_RETURN_IF_ERROR(LoadTensors("inputs", true, task_.inputs));
    KF_RETURN_IF_ERROR(LoadTensors("outputs", false, task_.outputs));
    KF_RETURN_IF_ERROR(CheckCountedOutputs(f_, tensor_lines_, task_.outputs));
    KF_RETURN_IF_ERROR(LoadToleranceTable());
    KF_RETURN_IF_ERROR(LoadSizes());
    KF_RETURN_IF_ERROR(LoadPerfPolicyWorkspace());
    KF_RETURN_IF_ERROR(LoadFloor(f_, root_, task_.floor, exprs_));
    KF_RETURN_IF_ERROR(LoadExpert(f_, root_, dir_, task_.expert));
    KF_RETURN_IF_ERROR(CheckTolerancesCover());
    KF_RETURN_IF_ERROR(CheckSizesBindVariables());
    KF_RETURN_IF_ERROR(LoadFiles());
    return std::move(task_);
  }

 private:
  Status LoadHeader() {
    task_.dir = dir_;
    task_.key = dir_.filename().string();
    const toml::node* id_node = root_.get("id");
    KF_ASSIGN_OR_RETURN(int64_t id, f_.RequiredInteger(root_, "", "id"));
    KF_ASSIGN_OR_RETURN(task_.name, f_.RequiredString(root_, "", "name"));
    const toml::node* name_node = root_.get("name");
    auto split = SplitKey(task_.key);
    if (!split) {
      return f_.Fail(
          id_node, "id",
          fmt::format("the task folder '{}' is not named <NNN>_<name> (e.g. 001_allreduce)",
                      task_.key));
    }
    if (id != split->first) {
      return f_.Fail(id_node, "id",
                     fmt::format("{} does not match the folder prefix of '{}'", id, task_.key));
    }
    task_.id = static_cast<int>(id);
    if (!IsTaskName(task_.name)) {
      return f_.Fail(name_node, "name", fmt::format("'{}' must use only [a-z0-9_]", task_.name));
    }
    if (task_.name != split->second) {
      return f_.Fail(
          name_node, "name",
          fmt::format("'{}' does not match the folder name '{}'", task_.name, task_.key));
    }
    KF_ASSIGN_OR_RETURN(task_.title, f_.RequiredString(root_, "", "title"));
    KF_ASSIGN_OR_RETURN(task_.category, f_.RequiredString(root_, "", "category"));
    KF_ASSIGN_OR_RETURN(task_.description, f_.RequiredString(root_, "", "description"));
    KF_ASSIGN_OR_RETURN(auto prov, f_.OptionalString(root_, "", "provenance"));
    task_.provenance = prov.value_or("");
    return Status::Ok();
  }

  Result<const toml::array*> RequiredArray(const toml::table& t, std::string_view prefix,
                                           std::string_view key) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return f_.Fail(&t, Join(prefix, key), "required field is missing");
    if (!n->is_array()) {
      return f_.Fail(n, Join(prefix, key),
                     fmt::format("expected an array, found {}", TypeName(*n)));
    }
    if (n->as_array()->empty()) return f_.Fail(n, Join(prefix, key), "must not be empty");
    return n->as_array();
  }

  Status LoadWorldSizes() {
    KF_ASSIGN_OR_RETURN(const toml::array* arr, RequiredArray(root_, "", "world_sizes"));
    for (size_t i = 0; i < arr->size(); ++i) {
      const toml::node& n = *arr->get(i);
      const std::string field = Index("world_sizes", i);
      if (!n.is_integer())
        return f_.Fail(&n, field, fmt::format("expected an integer, found {}", TypeName(n)));
      const int64_t w = n.as_integer()->get();
      if (w < 1 || w > kMaxWorld) {
        return f_.Fail(&n, field, fmt::format("{} is out of range (1..{})", w, kMaxWorld));
      }
      if (std::find(task_.world_sizes.begin(), task_.world_sizes.end(), w) !=
          task_.world_sizes.end()) {
        return f_.Fail(&n, field, fmt::format("{} is listed twice", w));
      }
      task_.world_sizes.push_back(static_cast<int>(w));
    }
    return Status::Ok();
  }

  Status LoadDtypes() {
    KF_ASSIGN_OR_RETURN(const toml::array* arr, RequiredArray(root_, "", "dtypes"));
    for (size_t i = 0; i < arr->size(); ++i) {
      const toml::node& n = *arr->get(i);
      const std::string field = Index("dtypes", i);
      if (!n.is_string())
        return f_.Fail(&n, field, fmt::format("expected a string, found {}", TypeName(n)));
      auto dt = ParseDtype(n.as_string()->get());
      if (!dt.ok()) return f_.Fail(&n, field, dt.status().message());
      if (std::find(task_.dtypes.begin(), task_.dtypes.end(), *dt) != task_.dtypes.end()) {
        return f_.Fail(&n, field, fmt::format("'{}' is listed twice", DtypeName(*dt)));
      }
      task_.dtypes.push_back(*dt);
    }
    return Status::Ok();
  }

  Status LoadParams() {
    const toml::node* n = root_.get("params");
    if (n == nullptr) return Status::Ok();
    if (!n->is_table())
      return f_.Fail(n, "params", fmt::format("expected a table, found {}", TypeName(*n)));
    for (const auto& [key, value] : *n->as_table()) {
      const std::string field = Join("params", key.str());
      if (!IsIdentifier(key.str()) || IsReserved(key.str())) {
        return f_.Fail(&value, field,
                       "a param name must be an identifier other than W, elem and rank");
      }
      KF_ASSIGN_OR_RETURN(double v, f_.Number(value, field));
      task_.params[std::string(key.str())] = v;
    }
    if (task_.params.size() > kMaxParams) {
      return f_.Fail(n, "params", fmt::format("at most {} params (kernel ABI limit)", kMaxParams));
    }
    return Status::Ok();
  }

  Status LoadTensor(const toml::table& t, const std::string& prefix, bool is_input,
                    TensorSpec& spec) {
    if (is_input) {
      KF_RETURN_IF_ERROR(
          f_.CheckKeys(t, prefix,
                       {"name", "dtype", "shape", "init", "same_on_all_ranks", "replicated",
                        "shard", "inout", "tolerance", "rank_symmetric"}));
    } else {
      KF_RETURN_IF_ERROR(f_.CheckKeys(
          t, prefix, {"name", "dtype", "shape", "ranks", "tolerance", "rank_symmetric", "count"}));
    }
    KF_ASSIGN_OR_RETURN(spec.name, f_.RequiredString(t, prefix, "name"));
    if (!IsIdentifier(spec.name)) {
      return f_.Fail(t.get("name"), Join(prefix, "name"),
                     fmt::format("'{}' is not an identifier", spec.name));
    }
    KF_ASSIGN_OR_RETURN(spec.dtype, f_.RequiredString(t, prefix, "dtype"));
    if (spec.dtype != "T") {
      auto dt = ParseDtype(spec.dtype);
      if (!dt.ok()) {
        return f_.Fail(t.get("dtype"), Join(prefix, "dtype"),
                       dt.status().message() + " or T (the task's dtype)");
      }
    }
    const std::string shape_field = Join(prefix, "shape");
    KF_ASSIGN_OR_RETURN(const toml::array* shape, RequiredArray(t, prefix, "shape"));
    if (shape->size() > kMaxDims) {
      return f_.Fail(shape, shape_field,
                     fmt::format("at most {} dimensions (kernel ABI limit)", kMaxDims));
    }
    for (size_t d = 0; d < shape->size(); ++d) {
      const std::string field = Index(shape_field, d);
      KF_ASSIGN_OR_RETURN(std::string dim, f_.Expression(*shape->get(d), field));
      Remember(field, shape->get(d), dim, /*per_rank=*/true);
      spec.shape.push_back(std::move(dim));
    }
    KF_ASSIGN_OR_RETURN(auto symmetric, f_.OptionalBool(t, prefix, "rank_symmetric"));
    spec.rank_symmetric = symmetric.value_or(false);
    if (is_input) {
      if (const toml::node* init = t.get("init")) {
        KF_RETURN_IF_ERROR(LoadInit(f_, *init, Join(prefix, "init"), spec.init, exprs_));
      }
      KF_RETURN_IF_ERROR(LoadDistribution(f_, t, prefix, task_.groups, spec));
      KF_ASSIGN_OR_RETURN(auto inout, f_.OptionalBool(t, prefix, "inout"));
      spec.inout = inout.value_or(false);
      if (const toml::node* tol = t.get("tolerance")) {
        if (!spec.inout) {
          return f_.Fail(tol, Join(prefix, "tolerance"),
                         "only an inout input is checked, so only it takes a tolerance");
        }
        KF_ASSIGN_OR_RETURN(spec.tolerance, LoadTolerance(f_, *tol, Join(prefix, "tolerance")));
      }
      if (spec.rank_symmetric && !spec.inout) {
        return f_.Fail(
            t.get("rank_symmetric"), Join(prefix, "rank_symmetric"),
            "only an output or an inout input is checked, so only it can be rank-symmetric");
      }
    } else {
      KF_ASSIGN_OR_RETURN(auto ranks, f_.OptionalExpression(t, prefix, "ranks"));
      spec.ranks = ranks.value_or("");
      KF_ASSIGN_OR_RETURN(auto count, f_.OptionalString(t, prefix, "count"));
      spec.count = count.value_or("");
      if (count) tensor_lines_[Join(prefix, "count")] = TomlFields::Line(t.get("count"));
      if (ranks) Remember(Join(prefix, "ranks"), t.get("ranks"), spec.ranks);
      if (const toml::node* tol = t.get("tolerance")) {
        KF_ASSIGN_OR_RETURN(spec.tolerance, LoadTolerance(f_, *tol, Join(prefix, "tolerance")));
      }
    }
    return Status::Ok();
  }

  Status LoadTensors(std::string_view key, bool is_input, std::vector<TensorSpec>& out) {
    const toml::node* n = root_.get(key);
    // An in-place input is checked like an output, so a task whose only
    // results are in-place updates (an in-place all-reduce) needs no [[outputs]].
    const bool has_inout = std::any_of(task_.inputs.begin(), task_.inputs.end(),
                                       [](const TensorSpec& s) { return s.inout; });
    if (n == nullptr) {
      if (is_input || has_inout) return Status::Ok();
      return f_.Fail(nullptr, key,
                     "required: a task needs at least one [[outputs]] (or an inout input)");
    }
    if (!n->is_array_of_tables()) {
      return f_.Fail(n, key, fmt::format("expected [[{}]] tables, found {}", key, TypeName(*n)));
    }
    const toml::array& arr = *n->as_array();
    if (arr.empty() && !is_input && !has_inout)
      return f_.Fail(n, key, "a task needs at least one output (or an inout input)");
    if (arr.size() > kMaxTensors) {
      return f_.Fail(n, key, fmt::format("at most {} tensors (kernel ABI limit)", kMaxTensors));
    }
    for (size_t i = 0; i < arr.size(); ++i) {
      const std::string prefix = Index(key, i);
      TensorSpec spec;
      KF_RETURN_IF_ERROR(LoadTensor(*arr.get(i)->as_table(), prefix, is_input, spec));
      if (!tensor_names_.insert(spec.name).second) {
        return f_.Fail(arr.get(i)->as_table()->get("name"), Join(prefix, "name"),
                       fmt::format("tensor name '{}' is used twice", spec.name));
      }
      tensor_lines_[prefix] = TomlFields::Line(arr.get(i));
      out.push_back(std::move(spec));
    }
    return Status::Ok();
  }

  Status LoadToleranceTable() {
    const toml::node* n = root_.get("tolerance");
    if (n == nullptr) return Status::Ok();
    if (!n->is_table())
      return f_.Fail(n, "tolerance", fmt::format("expected a table, found {}", TypeName(*n)));
    for (const auto& [key, value] : *n->as_table()) {
      const std::string field = Join("tolerance", key.str());
      auto dt = ParseDtype(key.str());
      if (!dt.ok()) return f_.Fail(&value, field, dt.status().message());
      KF_ASSIGN_OR_RETURN(task_.tolerance[*dt], LoadTolerance(f_, value, field));
    }
    return Status::Ok();
  }

  Status LoadSizeList(const toml::table& sizes, std::string_view key, std::vector<SizeSpec>& out) {
    const std::string list_field = Join("sizes", key);
    KF_ASSIGN_OR_RETURN(const toml::array* arr, RequiredArray(sizes, "sizes", key));
    std::set<std::string> labels;
    for (size_t i = 0; i < arr->size(); ++i) {
      const toml::node& n = *arr->get(i);
      const std::string prefix = Index(list_field, i);
      if (!n.is_table())
        return f_.Fail(&n, prefix, fmt::format("expected a table, found {}", TypeName(n)));
      const toml::table& t = *n.as_table();
      SizeSpec size;
      KF_ASSIGN_OR_RETURN(size.label, f_.RequiredString(t, prefix, "label"));
      if (size.label.empty())
        return f_.Fail(t.get("label"), Join(prefix, "label"), "must not be empty");
      if (!labels.insert(size.label).second) {
        return f_.Fail(t.get("label"), Join(prefix, "label"),
                       fmt::format("'{}' is used twice", size.label));
      }
      for (const auto& [var, value] : t) {
        if (var.str() == "label") continue;
        const std::string field = Join(prefix, var.str());
        if (!IsIdentifier(var.str()) || IsReserved(var.str()) ||
            task_.params.count(std::string(var.str())) != 0) {
          return f_.Fail(
              &value, field,
              "a size variable must be an identifier other than W, elem, rank and the params");
        }
        KF_ASSIGN_OR_RETURN(std::string e, f_.Expression(value, field));
        size.vars[std::string(var.str())] = std::move(e);
      }
      size_lines_.push_back({prefix, TomlFields::Line(&n), size.label});
      out.push_back(std::move(size));
    }
    return Status::Ok();
  }

  Status LoadSizes() {
    const toml::node* n = root_.get("sizes");
    if (n == nullptr) return f_.Fail(nullptr, "sizes", "required field is missing");
    if (!n->is_table())
      return f_.Fail(n, "sizes", fmt::format("expected a table, found {}", TypeName(*n)));
    const toml::table& t = *n->as_table();
    KF_RETURN_IF_ERROR(f_.CheckKeys(t, "sizes", {"check", "bench"}));
    KF_RETURN_IF_ERROR(LoadSizeList(t, "check", task_.check_sizes));
    KF_RETURN_IF_ERROR(LoadSizeList(t, "bench", task_.bench_sizes));
    return Status::Ok();
  }

  Status LoadPerfPolicyWorkspace() {
    const toml::node* perf = root_.get("perf");
    if (perf == nullptr) return f_.Fail(nullptr, "perf", "required field is missing (bytes = ...)");
    if (!perf->is_table())
      return f_.Fail(perf, "perf", fmt::format("expected a table, found {}", TypeName(*perf)));
    const toml::table& pt = *perf->as_table();
    KF_RETURN_IF_ERROR(f_.CheckKeys(pt, "perf", {"bytes", "busbw_factor"}));
    KF_ASSIGN_OR_RETURN(auto bytes, f_.OptionalExpression(pt, "perf", "bytes"));
    if (!bytes) return f_.Fail(perf, "perf.bytes", "required field is missing");
    task_.perf_bytes = *bytes;
    Remember("perf.bytes", pt.get("bytes"), task_.perf_bytes);
    KF_ASSIGN_OR_RETURN(auto factor, f_.OptionalExpression(pt, "perf", "busbw_factor"));
    task_.perf_busbw_factor = factor.value_or("1");
    if (factor) Remember("perf.busbw_factor", pt.get("busbw_factor"), *factor);

    if (const toml::node* policy = root_.get("policy")) {
      if (!policy->is_table()) {
        return f_.Fail(policy, "policy",
                       fmt::format("expected a table, found {}", TypeName(*policy)));
      }
      const toml::table& t = *policy->as_table();
      KF_RETURN_IF_ERROR(
          f_.CheckKeys(t, "policy", {"harness_collectives", "nccl", "cublas", "cufft", "cudnn"}));
      KF_ASSIGN_OR_RETURN(auto hc, f_.OptionalBool(t, "policy", "harness_collectives"));
      KF_ASSIGN_OR_RETURN(auto nccl, f_.OptionalBool(t, "policy", "nccl"));
      KF_ASSIGN_OR_RETURN(auto cublas, f_.OptionalBool(t, "policy", "cublas"));
      KF_ASSIGN_OR_RETURN(auto cufft, f_.OptionalBool(t, "policy", "cufft"));
      KF_ASSIGN_OR_RETURN(auto cudnn, f_.OptionalBool(t, "policy", "cudnn"));
      task_.policy.harness_collectives = hc.value_or(false);
      task_.policy.nccl = nccl.value_or(false);
      task_.policy.cublas = cublas.value_or(false);
      task_.policy.cufft = cufft.value_or(false);
      task_.policy.cudnn = cudnn.value_or(false);
    }
    KF_ASSIGN_OR_RETURN(auto ws, f_.OptionalExpression(root_, "", "workspace"));
    task_.workspace = ws.value_or("");
    if (ws) Remember("workspace", root_.get("workspace"), *ws);
    return Status::Ok();
  }

  // Every dtype an output can take needs a tolerance, unless the output sets
  // its own or the dtype is exact (integers, bool).
  Status CheckTolerancesCover() {
    KF_RETURN_IF_ERROR(CheckTolerancesCover(task_.outputs, "outputs", false));
    return CheckTolerancesCover(task_.inputs, "inputs", true);
  }

  Status CheckTolerancesCover(const std::vector<TensorSpec>& tensors, std::string_view key,
                              bool inout_only) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorSpec& out = tensors[i];
      if (out.tolerance || (inout_only && !out.inout)) continue;
      std::vector<Dtype> can_be = task_.dtypes;
      if (out.dtype != "T") can_be = {*ParseDtype(out.dtype)};
      for (Dtype dt : can_be) {
        if (!IsFloating(dt) || task_.tolerance.count(dt) != 0) continue;
        const std::string prefix = Index(key, i);
        return f_.FailAtLine(tensor_lines_[prefix], Join(prefix, "tolerance"),
                             fmt::format("{} '{}' can be {} but there is no tolerance for it "
                                         "(add [tolerance] {} = {{ atol = ..., rtol = ... }})",
                                         inout_only ? "inout input" : "output", out.name,
                                         DtypeName(dt), DtypeName(dt)));
      }
    }
    return Status::Ok();
  }

  // Each size, with W, elem and the params, must bind every variable that any
  // expression of the task reads.
  Status CheckSizesBindVariables() {
    std::vector<const SizeSpec*> all;
    for (const auto& s : task_.check_sizes) all.push_back(&s);
    for (const auto& s : task_.bench_sizes) all.push_back(&s);
    for (size_t k = 0; k < all.size(); ++k) {
      std::set<std::string> bound = {"W", "elem"};
      for (const auto& [name, v] : task_.params) bound.insert(name);
      for (const auto& [name, v] : all[k]->vars) bound.insert(name);
      std::vector<ExprSite> exprs = exprs_;
      for (const auto& [name, text] : all[k]->vars) {
        exprs.push_back({Join(size_lines_[k].field, name), size_lines_[k].line, text});
      }
      for (const ExprSite& e : exprs) {
        auto parsed = Expr::Parse(e.expr);
        if (!parsed.ok()) return f_.FailAtLine(e.line, e.field, parsed.status().message());
        for (const std::string& var : parsed->Variables()) {
          if (bound.count(var) != 0 || (e.per_rank && var == "rank")) continue;
          return f_.FailAtLine(
              size_lines_[k].line, size_lines_[k].field,
              fmt::format("size '{}' does not bind '{}', which {} ('{}', line {}) uses",
                          all[k]->label, var, e.field, e.expr, e.line));
        }
      }
    }
    return Status::Ok();
  }

  Status LoadFiles() {
    task_.reference = dir_ / "reference.cu";
    std::error_code ec;
    if (!fs::is_regular_file(task_.reference, ec)) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("{}: missing (every task needs its baseline kernel)",
                               task_.reference.string()));
    }
    const fs::path solutions = dir_ / "solutions";
    if (fs::is_directory(solutions, ec)) {
      for (const auto& entry : fs::directory_iterator(solutions, ec)) {
        if (entry.is_regular_file() && entry.path().extension() == ".cu")
          task_.solutions.push_back(entry.path());
      }
      if (ec) return Error(ErrorKind::kIo, fmt::format("{}: {}", solutions.string(), ec.message()));
      std::sort(task_.solutions.begin(), task_.solutions.end());
    }
    return Status::Ok();
  }

  void Remember(std::string field, const toml::node* at, const std::string& expr,
                bool per_rank = false) {
    exprs_.push_back({std::move(field), TomlFields::Line(at), expr, per_rank});
  }

  fs::path dir_;
  TomlFields f_;
  const toml::table& root_;
  Task task_;
  std::set<std::string> tensor_names_;
  std::map<std::string, int> tensor_lines_;
  std::vector<ExprSite> exprs_;       // every expression outside [sizes]
  std::vector<ExprSite> size_lines_;  // check sizes then bench sizes; expr = label
};

}  // namespace

Result<Task> LoadTask(const fs::path& dir_in) {
  fs::path dir = dir_in;
  if (dir.filename().empty()) dir = dir.parent_path();  // "tasks/001_x/"
  const fs::path file = dir / "task.toml";
  const std::string display = file.string();
  KF_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
  toml::table root;
  try {
    root = toml::parse(text, display);
  } catch (const toml::parse_error& e) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{}:{}:{}: TOML syntax error: {}", display, e.source().begin.line,
                             e.source().begin.column, e.description()));
  }
  Loader loader(dir, display, root);
  return loader.Load();
}

}  // namespace kforge::eval
