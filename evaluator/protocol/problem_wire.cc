#include "protocol/problem_wire.h"

#include <fmt/format.h>

#include "kforge/abi_limits.h"
#include "protocol/wire.h"

namespace kforge::eval::proto {
namespace {

using nlohmann::json;
using wire::WireReader;

constexpr int64_t kMaxNumel = int64_t{1} << 40;
constexpr size_t kMaxName = 128;

json TensorToJson(const ConcreteTensor& t) {
  std::vector<int64_t> until;
  std::vector<double> pa, pb;
  for (const ConcreteTensor::Piece& piece : t.init_pieces) {
    until.push_back(piece.until);
    pa.push_back(piece.a);
    pb.push_back(piece.b);
  }
  json j = {{"name", t.name},
            {"dtype", static_cast<int>(t.dtype)},
            {"shape", t.shape},
            {"numel", t.numel},
            {"nbytes", t.nbytes},
            {"rank_shapes", t.rank_shapes},
            {"only_rank", t.only_rank},
            {"atol", t.tolerance.atol},
            {"rtol", t.tolerance.rtol},
            {"rms", t.tolerance.rms},
            {"inout_of", t.inout_of},
            {"count_output", t.count_output},
            {"init", static_cast<int>(t.init)},
            {"init_a", t.init_a},
            {"init_b", t.init_b},
            {"init_column_std", t.init_column_std},
            {"init_distinct", t.init_distinct},
            {"init_until", until},
            {"init_pa", pa},
            {"init_pb", pb},
            {"dist", static_cast<int>(t.distribution.kind)},
            {"dist_dim", t.distribution.dim},
            {"dist_group", t.distribution.group},
            {"inout", t.inout}};
  return j;
}

int64_t Product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Status ShapeOk(const std::vector<int64_t>& shape, const std::string& name) {
  if (shape.size() > KF_MAX_DIMS) {
    return Error(ErrorKind::kHarness,
                 fmt::format("tensor '{}' has more than {} dims", name, KF_MAX_DIMS));
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d != 0 && n > kMaxNumel / d)) {
      return Error(ErrorKind::kHarness, fmt::format("tensor '{}' has a bad shape", name));
    }
    n *= d;
  }
  return Status::Ok();
}

Result<ConcreteTensor> TensorFromJson(const json& j, int world, const std::string& what) {
  WireReader r(j, what);
  ConcreteTensor t;
  int dtype = 0, init = 0, dist = 0;
  r.String("name", &t.name, kMaxName);
  r.Int("dtype", &dtype, 0, static_cast<int>(Dtype::kBool));
  r.Ints("shape", &t.shape, KF_MAX_DIMS);
  r.Int("numel", &t.numel, 0, kMaxNumel);
  r.Size("nbytes", &t.nbytes);
  r.Int("only_rank", &t.only_rank, -1, world - 1);
  r.Double("atol", &t.tolerance.atol, 0);
  r.Double("rtol", &t.tolerance.rtol, 0);
  r.Double("rms", &t.tolerance.rms, 0);
  r.Int("inout_of", &t.inout_of, -1, KF_MAX_TENSORS - 1);
  r.Int("count_output", &t.count_output, -1, KF_MAX_TENSORS - 1);
  r.Int("init", &init, 0, static_cast<int>(InitSpec::Kind::kCustom));
  r.Double("init_a", &t.init_a);
  r.Double("init_b", &t.init_b);
  r.Double("init_column_std", &t.init_column_std, 0);
  r.Bool("init_distinct", &t.init_distinct);
  std::vector<int64_t> until;
  std::vector<double> pa, pb;
  r.Ints("init_until", &until, kMaxInitPieces);
  r.Doubles("init_pa", &pa, kMaxInitPieces);
  r.Doubles("init_pb", &pb, kMaxInitPieces);
  r.Int("dist", &dist, 0, static_cast<int>(Distribution::Kind::kShard));
  r.Int("dist_dim", &t.distribution.dim, 0, KF_MAX_DIMS - 1);
  r.String("dist_group", &t.distribution.group, kMaxName);
  r.Bool("inout", &t.inout);
  const json* rs = r.Array("rank_shapes", KF_MAX_RANKS);
  if (!r.ok()) return r.status();
  t.dtype = static_cast<Dtype>(dtype);
  t.init = static_cast<InitSpec::Kind>(init);
  if (until.size() != pa.size() || until.size() != pb.size()) {
    return Error(ErrorKind::kHarness, fmt::format("{}: init pieces of unequal lengths", what));
  }
  for (size_t k = 0; k < until.size(); ++k) t.init_pieces.push_back({until[k], pa[k], pb[k]});
  t.distribution.kind = static_cast<Distribution::Kind>(dist);
  KF_RETURN_IF_ERROR(ShapeOk(t.shape, t.name));
  if (t.numel != Product(t.shape) ||
      t.nbytes != static_cast<size_t>(t.numel) * DtypeSize(t.dtype)) {
    return Error(ErrorKind::kHarness,
                 fmt::format("{}: numel/nbytes disagree with the shape", what));
  }
  if (!rs->empty()) {
    if (static_cast<int>(rs->size()) != world) {
      return Error(ErrorKind::kHarness,
                   fmt::format("{}: rank_shapes is not one shape per rank", what));
    }
    for (const json& s : *rs) {
      if (!s.is_array() || s.size() > KF_MAX_DIMS) {
        return Error(ErrorKind::kHarness, fmt::format("{}: a rank shape is not an array", what));
      }
      std::vector<int64_t> shape;
      for (const json& d : s) {
        if (!d.is_number_integer()) return Error(ErrorKind::kHarness, what + ": bad rank shape");
        shape.push_back(d.get<int64_t>());
      }
      KF_RETURN_IF_ERROR(ShapeOk(shape, t.name));
      if (Product(shape) > t.numel) {
        return Error(ErrorKind::kHarness,
                     fmt::format("{}: a rank's shape exceeds the allocation", what));
      }
      t.rank_shapes.push_back(std::move(shape));
    }
  }
  return t;
}

}  // namespace

json ProblemToJson(const Problem& p) {
  json inputs = json::array(), outputs = json::array(), groups = json::array();
  for (const auto& t : p.inputs) inputs.push_back(TensorToJson(t));
  for (const auto& t : p.outputs) outputs.push_back(TensorToJson(t));
  for (const auto& g : p.groups) {
    groups.push_back({{"name", g.name}, {"size", g.size}, {"layout", static_cast<int>(g.layout)}});
  }
  json vars = json::object();
  for (const auto& [k, v] : p.vars) vars[k] = v;
  return {{"task_name", p.task_name},
          {"world", p.world},
          {"dtype", static_cast<int>(p.dtype)},
          {"size_label", p.size_label},
          {"is_check_size", p.is_check_size},
          {"vars", vars},
          {"inputs", inputs},
          {"outputs", outputs},
          {"groups", groups},
          {"workspace_bytes", p.workspace_bytes},
          {"perf_bytes", p.perf_bytes},
          {"busbw_factor", p.busbw_factor}};
}

Result<Problem> ProblemFromJson(const json& j) {
  WireReader r(j, "problem");
  Problem p;
  int dtype = 0;
  r.String("task_name", &p.task_name, kMaxName);
  r.Int("world", &p.world, 1, KF_MAX_RANKS);
  r.Int("dtype", &dtype, 0, static_cast<int>(Dtype::kBool));
  r.String("size_label", &p.size_label, kMaxName);
  r.Bool("is_check_size", &p.is_check_size);
  r.Size("workspace_bytes", &p.workspace_bytes, size_t{1} << 40);
  r.Double("perf_bytes", &p.perf_bytes, 0);
  r.Double("busbw_factor", &p.busbw_factor, 0);
  const json* vars = r.Object("vars");
  const json* inputs = r.Array("inputs", KF_MAX_TENSORS);
  const json* outputs = r.Array("outputs", 2 * KF_MAX_TENSORS);
  const json* groups = r.Array("groups", KF_MAX_GROUPS);
  if (!r.ok()) return r.status();
  p.dtype = static_cast<Dtype>(dtype);
  if (vars->size() > 4 * KF_MAX_PARAMS) return Error(ErrorKind::kHarness, "problem: too many vars");
  for (const auto& [k, v] : vars->items()) {
    if (!v.is_number() || k.size() > kMaxName)
      return Error(ErrorKind::kHarness, "problem: bad var");
    p.vars[k] = v.get<double>();
  }
  for (size_t i = 0; i < inputs->size(); ++i) {
    KF_ASSIGN_OR_RETURN(ConcreteTensor t,
                        TensorFromJson((*inputs)[i], p.world, fmt::format("problem input {}", i)));
    p.inputs.push_back(std::move(t));
  }
  for (size_t i = 0; i < outputs->size(); ++i) {
    KF_ASSIGN_OR_RETURN(ConcreteTensor t, TensorFromJson((*outputs)[i], p.world,
                                                         fmt::format("problem output {}", i)));
    if (t.inout_of >= static_cast<int>(p.inputs.size())) {
      return Error(ErrorKind::kHarness, "problem: an inout output names no input");
    }
    if (t.count_output >= 0 &&
        (t.count_output >= static_cast<int>(outputs->size()) || t.shape.empty())) {
      return Error(ErrorKind::kHarness, "problem: a counted output names no output");
    }
    p.outputs.push_back(std::move(t));
  }
  for (const json& g : *groups) {
    WireReader gr(g, "problem group");
    ConcreteGroup cg;
    int layout = 0;
    gr.String("name", &cg.name, kMaxName);
    gr.Int("size", &cg.size, 1, p.world);
    gr.Int("layout", &layout, 0, 1);
    if (!gr.ok()) return gr.status();
    if (p.world % cg.size != 0)
      return Error(ErrorKind::kHarness, "problem: a group size does not divide W");
    cg.layout = static_cast<GroupSpec::Layout>(layout);
    p.groups.push_back(std::move(cg));
  }
  for (const ConcreteTensor& t : p.outputs) {
    if (t.count_output >= 0 && p.outputs[static_cast<size_t>(t.count_output)].numel != 1)
      return Error(ErrorKind::kHarness, "problem: a count output is not one number");
  }
  if (p.KernelOutputCount() > KF_MAX_TENSORS)
    return Error(ErrorKind::kHarness, "problem: too many outputs");
  return p;
}

std::vector<std::pair<std::string, double>> KernelParams(const Problem& p) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [k, v] : p.vars) {
    if (k == "W" || k == "elem") continue;
    if (out.size() == KF_MAX_PARAMS) break;
    out.emplace_back(k, v);
  }
  return out;
}

}  // namespace kforge::eval::proto
