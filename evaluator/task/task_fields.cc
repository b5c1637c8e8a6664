#include "task_fields.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <utility>

#include "kforge/abi_limits.h"
#include "task/expr.h"

namespace kforge::eval::internal {
namespace {

bool IsIdentifier(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

}  // namespace

// { atol = ..., rtol = ..., rms = ... }: numbers or expressions (e.g. "2^-8 * (W - 1)").
Result<ToleranceSpec> LoadTolerance(const TomlFields& f, const toml::node& n,
                                    const std::string& field) {
  if (!n.is_table()) {
    return f.Fail(&n, field,
                  fmt::format("expected {{ atol = ..., rtol = ... }}, found {}", TypeName(n)));
  }
  const toml::table& t = *n.as_table();
  KF_RETURN_IF_ERROR(f.CheckKeys(t, field, {"atol", "rtol", "rms"}));
  if (t.empty()) return f.Fail(&n, field, "needs atol and/or rtol");
  ToleranceSpec tol;
  KF_ASSIGN_OR_RETURN(auto atol, f.OptionalExpression(t, field, "atol"));
  KF_ASSIGN_OR_RETURN(auto rtol, f.OptionalExpression(t, field, "rtol"));
  tol.atol = atol.value_or("0");
  tol.rtol = rtol.value_or("0");
  KF_ASSIGN_OR_RETURN(auto rms, f.OptionalExpression(t, field, "rms"));
  tol.rms = rms.value_or("0");
  for (const std::string* e : {&tol.atol, &tol.rtol, &tol.rms}) {
    // A plain number is checked now; an expression when it is instantiated.
    if (auto v = Evaluate(*e, {}); v.ok() && *v < 0) {
      return f.Fail(&n, field, "atol, rtol and rms must be >= 0");
    }
  }
  return tol;
}

namespace {

// A normal's mean/std or a uniform's low/high (numbers or expressions) and its
// optional pieces, each piece's parameters defaulting to the table's.
Status LoadContinuousInit(const TomlFields& f, const toml::node& n, const std::string& field,
                          bool normal, InitSpec& init, ExprSites& sink) {
  const toml::table& t = *n.as_table();
  const char* a_key = normal ? "mean" : "low";
  const char* b_key = normal ? "std" : "high";
  std::vector<std::string_view> keys = {"kind", a_key, b_key, "pieces"};
  if (normal) keys.push_back("column_std");
  keys.push_back("distinct");
  KF_RETURN_IF_ERROR(f.CheckKeys(t, field, keys));
  KF_ASSIGN_OR_RETURN(auto a, f.OptionalExpression(t, field, a_key));
  KF_ASSIGN_OR_RETURN(auto b, f.OptionalExpression(t, field, b_key));
  std::string& init_a = normal ? init.mean : init.low;
  std::string& init_b = normal ? init.std : init.high;
  init_a = a.value_or(normal ? "0" : "-1");
  init_b = b.value_or("1");
  // Plain numbers are checked now; expressions when they are instantiated.
  auto check = [&](const std::string& pa, const std::string& pb, const toml::node* at,
                   const std::string& where) -> Status {
    auto va = Evaluate(pa, {});
    auto vb = Evaluate(pb, {});
    if (normal && vb.ok() && *vb < 0) return f.Fail(at, Join(where, b_key), "must be >= 0");
    if (!normal && va.ok() && vb.ok() && !(*va < *vb)) return f.Fail(at, where, "needs low < high");
    return Status::Ok();
  };
  KF_RETURN_IF_ERROR(check(init_a, init_b, normal && t.get(b_key) ? t.get(b_key) : &n, field));
  KF_ASSIGN_OR_RETURN(auto distinct, f.OptionalBool(t, field, "distinct"));
  init.distinct = distinct.value_or(false);
  if (normal && t.get("column_std")) {
    KF_ASSIGN_OR_RETURN(auto cs, f.OptionalExpression(t, field, "column_std"));
    init.column_std = cs.value_or("0");
    if (auto v = Evaluate(init.column_std, {}); v.ok() && !(*v >= 0)) {
      return f.Fail(t.get("column_std"), Join(field, "column_std"), "must be >= 0");
    }
    sink.push_back(
        {Join(field, "column_std"), TomlFields::Line(t.get("column_std")), init.column_std});
  }
  for (const char* key : {a_key, b_key}) {
    if (t.get(key)) {
      sink.push_back(
          {Join(field, key), TomlFields::Line(t.get(key)), key == a_key ? init_a : init_b});
    }
  }
  const toml::node* pieces = t.get("pieces");
  if (pieces == nullptr) return Status::Ok();
  const std::string pfield = Join(field, "pieces");
  const toml::array* list = pieces->as_array();
  if (list == nullptr || list->empty() || list->size() > static_cast<size_t>(kMaxInitPieces)) {
    return f.Fail(
        pieces, pfield,
        fmt::format("expected an array of 1 to {} tables {{ until = ..., {} = ..., {} = ... }}",
                    kMaxInitPieces, a_key, b_key));
  }
  for (size_t k = 0; k < list->size(); ++k) {
    const std::string pf = fmt::format("{}[{}]", pfield, k);
    const toml::node& pn = *list->get(k);
    if (!pn.is_table())
      return f.Fail(&pn, pf, fmt::format("expected a table, found {}", TypeName(pn)));
    const toml::table& pt = *pn.as_table();
    KF_RETURN_IF_ERROR(f.CheckKeys(pt, pf, {"until", a_key, b_key}));
    const bool last = k + 1 == list->size();
    KF_ASSIGN_OR_RETURN(auto until, f.OptionalExpression(pt, pf, "until"));
    if (last && until) {
      return f.Fail(pt.get("until"), Join(pf, "until"),
                    "the last piece takes the rest of the tensor: leave out its until");
    }
    if (!last && !until)
      return f.Fail(&pn, Join(pf, "until"), "required on every piece but the last");
    KF_ASSIGN_OR_RETURN(auto pa, f.OptionalExpression(pt, pf, a_key));
    KF_ASSIGN_OR_RETURN(auto pb, f.OptionalExpression(pt, pf, b_key));
    InitPieceSpec piece{until.value_or(""), pa.value_or(init_a), pb.value_or(init_b)};
    KF_RETURN_IF_ERROR(check(piece.a, piece.b, normal && pt.get(b_key) ? pt.get(b_key) : &pn, pf));
    if (until) sink.push_back({Join(pf, "until"), TomlFields::Line(pt.get("until")), piece.until});
    if (pa) sink.push_back({Join(pf, a_key), TomlFields::Line(pt.get(a_key)), piece.a});
    if (pb) sink.push_back({Join(pf, b_key), TomlFields::Line(pt.get(b_key)), piece.b});
    init.pieces.push_back(std::move(piece));
  }
  return Status::Ok();
}

}  // namespace

Status LoadInit(const TomlFields& f, const toml::node& n, const std::string& field, InitSpec& init,
                ExprSites& sink) {
  if (!n.is_table())
    return f.Fail(&n, field, fmt::format("expected a table, found {}", TypeName(n)));
  const toml::table& t = *n.as_table();
  KF_ASSIGN_OR_RETURN(std::string kind, f.RequiredString(t, field, "kind"));
  const std::string kind_field = Join(field, "kind");
  if (kind == "normal" || kind == "uniform") {
    init.kind = kind == "normal" ? InitSpec::Kind::kNormal : InitSpec::Kind::kUniform;
    KF_RETURN_IF_ERROR(LoadContinuousInit(f, n, field, kind == "normal", init, sink));
  } else if (kind == "int") {
    init.kind = InitSpec::Kind::kInt;
    KF_RETURN_IF_ERROR(f.CheckKeys(t, field, {"kind", "low", "high"}));
    KF_ASSIGN_OR_RETURN(auto low, f.OptionalExpression(t, field, "low"));
    KF_ASSIGN_OR_RETURN(auto high, f.OptionalExpression(t, field, "high"));
    init.int_low = low.value_or("0");
    init.int_high = high.value_or("100");
    sink.push_back(
        {Join(field, "low"), TomlFields::Line(t.get("low") ? t.get("low") : &n), init.int_low});
    sink.push_back(
        {Join(field, "high"), TomlFields::Line(t.get("high") ? t.get("high") : &n), init.int_high});
  } else if (kind == "permutation" || kind == "custom") {
    init.kind = kind == "custom" ? InitSpec::Kind::kCustom : InitSpec::Kind::kPermutation;
    KF_RETURN_IF_ERROR(f.CheckKeys(t, field, {"kind"}));
  } else {
    return f.Fail(
        t.get("kind"), kind_field,
        fmt::format(
            "unknown init kind '{}' (expected one of normal, uniform, int, permutation, custom)",
            kind));
  }
  return Status::Ok();
}

// replicated = true (or same_on_all_ranks), or shard = { dim = D, group = "name" }:
// the rank's slice along D of one global tensor (group omitted: the world).
Status LoadDistribution(const TomlFields& f, const toml::table& t, const std::string& prefix,
                        const std::vector<GroupSpec>& groups, TensorSpec& spec) {
  KF_ASSIGN_OR_RETURN(auto same, f.OptionalBool(t, prefix, "same_on_all_ranks"));
  KF_ASSIGN_OR_RETURN(auto replicated, f.OptionalBool(t, prefix, "replicated"));
  spec.same_on_all_ranks = same.value_or(false) || replicated.value_or(false);
  if (spec.same_on_all_ranks) spec.distribution.kind = Distribution::Kind::kReplicated;
  const toml::node* shard = t.get("shard");
  if (shard == nullptr) return Status::Ok();
  const std::string field = Join(prefix, "shard");
  if (spec.same_on_all_ranks) {
    return f.Fail(shard, field, "an input is either replicated or sharded, not both");
  }
  if (!shard->is_table()) {
    return f.Fail(shard, field,
                  fmt::format("expected {{ dim = ..., group = ... }}, found {}", TypeName(*shard)));
  }
  const toml::table& st = *shard->as_table();
  KF_RETURN_IF_ERROR(f.CheckKeys(st, field, {"dim", "group"}));
  KF_ASSIGN_OR_RETURN(int64_t dim, f.RequiredInteger(st, field, "dim"));
  const toml::array* shape = t.get("shape") ? t.get("shape")->as_array() : nullptr;
  if (dim < 0 || shape == nullptr || dim >= static_cast<int64_t>(shape->size())) {
    return f.Fail(st.get("dim"), Join(field, "dim"),
                  fmt::format("{} is not a dimension of the shape", dim));
  }
  KF_ASSIGN_OR_RETURN(auto group, f.OptionalString(st, field, "group"));
  if (group && std::none_of(groups.begin(), groups.end(),
                            [&](const GroupSpec& g) { return g.name == *group; })) {
    return f.Fail(st.get("group"), Join(field, "group"),
                  fmt::format("'{}' is not one of the task's [[groups]]", *group));
  }
  if (spec.init.distinct) {
    return f.Fail(shard, field,
                  "a sharded input cannot have init.distinct: its rows are slices of one global "
                  "tensor's");
  }
  spec.distribution.kind = Distribution::Kind::kShard;
  spec.distribution.dim = static_cast<int>(dim);
  spec.distribution.group = group.value_or("");
  return Status::Ok();
}

// [[groups]]: name, size (an expression dividing W), layout.
Status LoadGroups(const TomlFields& f, const toml::table& root, std::vector<GroupSpec>& groups,
                  ExprSites& sink) {
  const toml::node* n = root.get("groups");
  if (n == nullptr) return Status::Ok();
  if (!n->is_array_of_tables()) {
    return f.Fail(n, "groups", fmt::format("expected [[groups]] tables, found {}", TypeName(*n)));
  }
  const toml::array& arr = *n->as_array();
  if (arr.size() > KF_MAX_GROUPS) {
    return f.Fail(n, "groups", fmt::format("at most {} groups (kernel ABI limit)", KF_MAX_GROUPS));
  }
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string prefix = Index("groups", i);
    const toml::table& t = *arr.get(i)->as_table();
    KF_RETURN_IF_ERROR(f.CheckKeys(t, prefix, {"name", "size", "layout"}));
    GroupSpec g;
    KF_ASSIGN_OR_RETURN(g.name, f.RequiredString(t, prefix, "name"));
    if (!IsIdentifier(g.name)) {
      return f.Fail(t.get("name"), Join(prefix, "name"),
                    fmt::format("'{}' is not an identifier", g.name));
    }
    for (const GroupSpec& other : groups) {
      if (other.name == g.name) {
        return f.Fail(t.get("name"), Join(prefix, "name"),
                      fmt::format("group name '{}' is used twice", g.name));
      }
    }
    const toml::node* size = t.get("size");
    if (size == nullptr) return f.Fail(&t, Join(prefix, "size"), "required field is missing");
    KF_ASSIGN_OR_RETURN(g.size, f.Expression(*size, Join(prefix, "size")));
    sink.push_back({Join(prefix, "size"), TomlFields::Line(size), g.size});
    KF_ASSIGN_OR_RETURN(auto layout, f.OptionalString(t, prefix, "layout"));
    if (layout && *layout == "strided") {
      g.layout = GroupSpec::Layout::kStrided;
    } else if (layout && *layout != "contiguous") {
      return f.Fail(t.get("layout"), Join(prefix, "layout"),
                    fmt::format("'{}' is not a layout (contiguous or strided)", *layout));
    }
    groups.push_back(std::move(g));
  }
  return Status::Ok();
}

// [floor]: per rank and call, the HBM bytes, NVLink bytes and flops no
// kernel can avoid (expressions).
Status LoadFloor(const TomlFields& f, const toml::table& root, FloorSpec& floor, ExprSites& sink) {
  const toml::node* n = root.get("floor");
  if (n == nullptr) return Status::Ok();
  if (!n->is_table())
    return f.Fail(n, "floor", fmt::format("expected a table, found {}", TypeName(*n)));
  const toml::table& t = *n->as_table();
  KF_RETURN_IF_ERROR(f.CheckKeys(t, "floor", {"hbm_bytes", "link_bytes", "flops", "sync_rounds"}));
  if (t.empty()) return f.Fail(n, "floor", "needs hbm_bytes, link_bytes, flops and/or sync_rounds");
  const std::pair<std::string_view, std::string*> fields[] = {{"hbm_bytes", &floor.hbm_bytes},
                                                              {"link_bytes", &floor.link_bytes},
                                                              {"flops", &floor.flops},
                                                              {"sync_rounds", &floor.sync_rounds}};
  for (const auto& [key, dst] : fields) {
    KF_ASSIGN_OR_RETURN(auto e, f.OptionalExpression(t, "floor", key));
    if (!e) continue;
    *dst = *e;
    sink.push_back({Join("floor", key), TomlFields::Line(t.get(key)), *e});
  }
  return Status::Ok();
}

Status LoadExpert(const TomlFields& f, const toml::table& root, const std::filesystem::path& dir,
                  std::optional<ExpertSpec>& expert) {
  const toml::node* n = root.get("expert");
  if (n == nullptr) return Status::Ok();
  if (!n->is_table())
    return f.Fail(n, "expert", fmt::format("expected a table, found {}", TypeName(*n)));
  const toml::table& t = *n->as_table();
  KF_RETURN_IF_ERROR(f.CheckKeys(t, "expert", {"kernel", "technique", "none"}));
  KF_ASSIGN_OR_RETURN(auto kernel, f.OptionalString(t, "expert", "kernel"));
  KF_ASSIGN_OR_RETURN(auto technique, f.OptionalString(t, "expert", "technique"));
  KF_ASSIGN_OR_RETURN(auto none, f.OptionalString(t, "expert", "none"));
  ExpertSpec e;
  if (none) {
    if (kernel || technique) {
      return f.Fail(t.get(kernel ? "kernel" : "technique"),
                    kernel ? "expert.kernel" : "expert.technique",
                    "an expert kernel and `none` exclude each other");
    }
    if (none->empty())
      return f.Fail(t.get("none"), "expert.none", "say why there is no expert kernel");
    e.none = *none;
    expert = std::move(e);
    return Status::Ok();
  }
  if (!kernel) {
    return f.Fail(n, "expert",
                  "needs kernel = \"<file in the task folder>\" with its technique, or none = "
                  "\"<why no public technique beats the reference>\"");
  }
  if (!technique || technique->empty()) {
    return f.Fail(
        t.get("technique") ? t.get("technique") : n, "expert.technique",
        "say which public technique the expert kernel implements, and where it comes from");
  }
  // A relative path that stays inside the task folder, to a .cu file that is there.
  const std::filesystem::path rel(*kernel);
  const bool escapes =
      rel.is_absolute() || rel.empty() ||
      std::any_of(rel.begin(), rel.end(), [](const auto& part) { return part == ".."; });
  if (escapes || rel.extension() != ".cu") {
    return f.Fail(t.get("kernel"), "expert.kernel",
                  fmt::format("'{}' must be a .cu file inside the task folder (e.g. "
                              "\"solutions/oneshot.cu\")",
                              *kernel));
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dir / rel, ec)) {
    return f.Fail(t.get("kernel"), "expert.kernel",
                  fmt::format("{} does not exist", (dir / rel).string()));
  }
  e.kernel = dir / rel;
  e.technique = *technique;
  expert = std::move(e);
  return Status::Ok();
}

Status CheckCountedOutputs(const TomlFields& f, const std::map<std::string, int>& lines,
                           const std::vector<TensorSpec>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const TensorSpec& out = outputs[i];
    if (out.count.empty()) continue;
    const std::string prefix = Index("outputs", i);
    const auto line = lines.find(Join(prefix, "count"));
    auto fail = [&](const std::string& why) {
      return f.FailAtLine(line == lines.end() ? 1 : line->second, Join(prefix, "count"), why);
    };
    if (out.shape.empty()) return fail("a counted output needs a first dimension (its capacity)");
    const auto it = std::find_if(outputs.begin(), outputs.end(),
                                 [&](const TensorSpec& o) { return o.name == out.count; });
    if (it == outputs.end()) {
      return fail(fmt::format("'{}' is not one of the task's outputs", out.count));
    }
    if (it->name == out.name) return fail("an output cannot count its own rows");
    if (!it->count.empty()) {
      return fail(fmt::format("'{}' is a counted output itself; a count is one number", out.count));
    }
    if (it->dtype != "i32" && it->dtype != "i64") {
      return fail(
          fmt::format("the count '{}' must have dtype i32 or i64, not {}", out.count, it->dtype));
    }
    if (it->shape.size() != 1 || it->shape[0] != "1") {
      return fail(fmt::format("the count '{}' must have shape [\"1\"]", out.count));
    }
  }
  return Status::Ok();
}

}  // namespace kforge::eval::internal
