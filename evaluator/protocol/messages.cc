#include "protocol/messages.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kforge/abi_limits.h"
#include "protocol/problem_wire.h"
#include "protocol/wire.h"

namespace kforge::eval::proto {
namespace {

using nlohmann::json;
using wire::WireReader;

constexpr size_t kMaxCalls = 1 << 20;
constexpr size_t kMaxText = 4096;  // an error message, an anomaly

json SeedsToJson(const std::vector<SetSeed>& seeds) {
  json a = json::array();
  for (const auto& s : seeds) a.push_back({{"set", s.set}, {"seed", s.seed}});
  return a;
}

Status SeedsFromJson(const json* a, int max_sets, std::vector<SetSeed>* out) {
  for (const json& e : *a) {
    WireReader r(e, "set seed");
    SetSeed s;
    r.Int("set", &s.set, 0, max_sets - 1);
    r.Uint("seed", &s.seed);
    if (!r.ok()) return r.status();
    out->push_back(s);
  }
  return Status::Ok();
}

Status SetsInRange(const std::vector<int>& sets, int max_sets, const char* what) {
  for (int s : sets) {
    if (s < 0 || s >= max_sets) {
      return Error(ErrorKind::kHarness,
                   fmt::format("{}: set {} is not in [0, {})", what, s, max_sets));
    }
  }
  return Status::Ok();
}

json FailuresToJson(const std::vector<Failure>& failures) {
  json a = json::array();
  for (const auto& f : failures)
    a.push_back({{"set", f.set}, {"output", f.output}, {"report", f.report}});
  return a;
}

Status FailuresFromJson(const json* a, std::vector<Failure>* out) {
  for (const json& e : *a) {
    WireReader r(e, "failure");
    Failure f;
    r.Int("set", &f.set, 0, static_cast<int>(kMaxCalls));
    r.Int("output", &f.output, 0, 2 * KF_MAX_TENSORS);
    const json* report = r.Object("report");
    if (!r.ok()) return r.status();
    f.report = *report;
    out->push_back(std::move(f));
  }
  return Status::Ok();
}

json ChangedToJson(const std::vector<std::pair<int, std::string>>& changed) {
  json a = json::array();
  for (const auto& [set, name] : changed) a.push_back({{"set", set}, {"input", name}});
  return a;
}

Status ChangedFromJson(const json* a, std::vector<std::pair<int, std::string>>* out) {
  for (const json& e : *a) {
    WireReader r(e, "changed input");
    int set = 0;
    std::string name;
    r.Int("set", &set, 0, static_cast<int>(kMaxCalls));
    r.String("input", &name, 128);
    if (!r.ok()) return r.status();
    out->emplace_back(set, std::move(name));
  }
  return Status::Ok();
}

}  // namespace

// ---- hello ---------------------------------------------------------------

json Hello::ToJson() const {
  return {{"op", op::kHello},
          {"role", role},
          {"rank", rank},
          {"pid", pid},
          {"device", device},
          {"nccl_id", nccl_id},
          {"sandbox", sandbox},
          {"gpu",
           {{"name", gpu.name},
            {"cc_major", gpu.cc_major},
            {"cc_minor", gpu.cc_minor},
            {"sm_count", gpu.sm_count},
            {"max_threads_per_block", gpu.max_threads_per_block},
            {"smem_per_block_optin", gpu.smem_per_block_optin},
            {"smem_per_sm", gpu.smem_per_sm},
            {"l2_bytes", gpu.l2_bytes},
            {"hbm_bytes", gpu.hbm_bytes},
            {"p2p_all", gpu.p2p_all}}}};
}

Result<Hello> Hello::Parse(const json& j, const std::string& what) {
  WireReader r(j, what);
  Hello h;
  std::string op_name;
  r.String("op", &op_name, 32);
  r.String("role", &h.role, 16);
  r.Int("rank", &h.rank, 0, KF_MAX_RANKS - 1);
  r.Int("pid", &h.pid, 1);
  r.Int("device", &h.device, 0, 1024);
  r.String("nccl_id", &h.nccl_id, 512);
  const json* gpu = r.Object("gpu");
  if (!r.ok()) return r.status();
  if (op_name != op::kHello) return Error(ErrorKind::kHarness, what + ": not a hello");
  if (r.Has("sandbox")) {
    const json& sb = j.at("sandbox");
    if (!sb.is_null() && !sb.is_object())
      return Error(ErrorKind::kHarness, what + ": bad sandbox report");
    if (sb.dump().size() > 64 * 1024)
      return Error(ErrorKind::kHarness, what + ": sandbox report too large");
    h.sandbox = sb;
  }
  WireReader g(*gpu, what + " gpu");
  g.String("name", &h.gpu.name, 256);
  g.Int("cc_major", &h.gpu.cc_major, 0, 100);
  g.Int("cc_minor", &h.gpu.cc_minor, 0, 100);
  g.Int("sm_count", &h.gpu.sm_count, 0, 1 << 20);
  g.Int("max_threads_per_block", &h.gpu.max_threads_per_block, 0, 1 << 20);
  g.Size("smem_per_block_optin", &h.gpu.smem_per_block_optin);
  g.Size("smem_per_sm", &h.gpu.smem_per_sm);
  g.Size("l2_bytes", &h.gpu.l2_bytes);
  g.Size("hbm_bytes", &h.gpu.hbm_bytes);
  g.Int("p2p_all", &h.gpu.p2p_all, 0, 1);
  if (!g.ok()) return g.status();
  return h;
}

// ---- harness -------------------------------------------------------------

json ConfigureRequest::ToJson() const {
  json j = {{"op", op::kConfigure},
            {"problem", ProblemToJson(problem)},
            {"sets", sets},
            {"emulated", emulated},
            {"collectives", collectives},
            {"readonly_bytes", readonly_bytes}};
  if (!rms_vs_baseline.empty()) j["rms_vs_baseline"] = rms_vs_baseline;
  return j;
}

Result<ConfigureRequest> ConfigureRequest::Parse(const json& j) {
  WireReader r(j, "configure");
  ConfigureRequest c;
  r.Int("sets", &c.sets, 1, 256);
  r.Bool("emulated", &c.emulated);
  r.Bool("collectives", &c.collectives);
  r.Size("readonly_bytes", &c.readonly_bytes, size_t{1} << 42);
  if (r.Has("rms_vs_baseline")) r.Doubles("rms_vs_baseline", &c.rms_vs_baseline);
  const json* p = r.Object("problem");
  if (!r.ok()) return r.status();
  KF_ASSIGN_OR_RETURN(c.problem, ProblemFromJson(*p));
  if (!c.rms_vs_baseline.empty() && c.rms_vs_baseline.size() != c.problem.outputs.size())
    return Error(ErrorKind::kHarness, "configure: rms_vs_baseline needs one bound per output");
  for (double b : c.rms_vs_baseline) {
    if (b < 0) return Error(ErrorKind::kHarness, "configure: a negative rms_vs_baseline");
  }
  return c;
}

json InputsRequest::ToJson() const {
  json c = json::array();
  for (const auto& e : custom) {
    c.push_back({{"set", e.set}, {"input", e.input}, {"offset", e.offset}, {"nbytes", e.nbytes}});
  }
  return {{"op", op::kInputs}, {"seeds", SeedsToJson(seeds)}, {"custom", c}};
}

Result<InputsRequest> InputsRequest::Parse(const json& j) {
  WireReader r(j, "inputs");
  InputsRequest in;
  const json* seeds = r.Array("seeds", 256);
  const json* custom = r.Array("custom", 256 * KF_MAX_TENSORS);
  if (!r.ok()) return r.status();
  KF_RETURN_IF_ERROR(SeedsFromJson(seeds, 256, &in.seeds));
  for (const json& e : *custom) {
    WireReader c(e, "custom input");
    Custom x;
    c.Int("set", &x.set, 0, 255);
    c.Int("input", &x.input, 0, KF_MAX_TENSORS - 1);
    c.Size("offset", &x.offset);
    c.Size("nbytes", &x.nbytes);
    if (!c.ok()) return c.status();
    in.custom.push_back(x);
  }
  return in;
}

json SetsRequest::ToJson(const char* op_name) const {
  return {{"op", op_name}, {"sets", sets}, {"poison", poison}};
}

Result<SetsRequest> SetsRequest::Parse(const json& j, int max_sets) {
  WireReader r(j, "sets request");
  SetsRequest s;
  uint64_t poison = 0;
  r.Ints("sets", &s.sets, 256);
  r.Uint("poison", &poison);
  if (!r.ok()) return r.status();
  s.poison = static_cast<uint32_t>(poison);
  KF_RETURN_IF_ERROR(SetsInRange(s.sets, max_sets, "sets request"));
  return s;
}

json VerifyReply::ToJson() const {
  return {{"failures", FailuresToJson(failures)},
          {"inputs_changed", ChangedToJson(inputs_changed)}};
}

Result<VerifyReply> VerifyReply::Parse(const json& j, const std::string& what) {
  WireReader r(j, what);
  VerifyReply v;
  const json* f = r.Array("failures", 4096);
  const json* c = r.Array("inputs_changed", 4096);
  if (!r.ok()) return r.status();
  KF_RETURN_IF_ERROR(FailuresFromJson(f, &v.failures));
  KF_RETURN_IF_ERROR(ChangedFromJson(c, &v.inputs_changed));
  return v;
}

json ReadOutputsRequest::ToJson() const {
  json j = {{"op", op::kReadOutputs}, {"set", set}};
  if (baseline) j["baseline"] = true;
  return j;
}

Result<ReadOutputsRequest> ReadOutputsRequest::Parse(const json& j, int max_sets) {
  WireReader r(j, "read_outputs");
  ReadOutputsRequest q;
  r.Int("set", &q.set, 0, max_sets - 1);
  if (r.Has("baseline")) r.Bool("baseline", &q.baseline);
  if (!r.ok()) return r.status();
  return q;
}

json ReadOutputsReply::ToJson() const {
  return {{"offsets", offsets}, {"nbytes", nbytes}, {"inputs_changed", inputs_changed}};
}

Result<ReadOutputsReply> ReadOutputsReply::Parse(const json& j, const std::string& what) {
  WireReader r(j, what);
  ReadOutputsReply o;
  std::vector<int64_t> offsets, nbytes;
  r.Ints("offsets", &offsets, 2 * KF_MAX_TENSORS);
  r.Ints("nbytes", &nbytes, 2 * KF_MAX_TENSORS);
  r.Strings("inputs_changed", &o.inputs_changed, KF_MAX_TENSORS);
  if (!r.ok()) return r.status();
  if (offsets.size() != nbytes.size())
    return Error(ErrorKind::kHarness, what + ": offsets/nbytes differ");
  for (size_t i = 0; i < offsets.size(); ++i) {
    if (offsets[i] < 0 || nbytes[i] < 0)
      return Error(ErrorKind::kHarness, what + ": negative extent");
    o.offsets.push_back(static_cast<size_t>(offsets[i]));
    o.nbytes.push_back(static_cast<size_t>(nbytes[i]));
  }
  return o;
}

json CallTimes::ToJson() const { return {{"event_us", event_us}, {"wall_us", wall_us}}; }

Result<CallTimes> CallTimes::Parse(const json& j, const std::string& what, size_t calls) {
  WireReader r(j, what);
  CallTimes t;
  r.Doubles("event_us", &t.event_us, kMaxCalls);
  r.Doubles("wall_us", &t.wall_us, kMaxCalls);
  if (!r.ok()) return r.status();
  if (t.event_us.size() != calls || t.wall_us.size() != calls) {
    return Error(ErrorKind::kHarness,
                 fmt::format("{}: {} times for {} calls", what, t.event_us.size(), calls));
  }
  return t;
}

json DriveRequest::ToJson() const {
  json rs = json::array();
  for (const auto& round : rounds) {
    rs.push_back(
        {{"seeds", SeedsToJson(round.seeds)}, {"order", round.order}, {"poison", round.poison}});
  }
  return {{"op", op::kDrive},
          {"rounds", rs},
          {"first_seq", first_seq},
          {"warmup", warmup},
          {"call_deadline_s", call_deadline_s}};
}

Result<DriveRequest> DriveRequest::Parse(const json& j, int max_sets) {
  WireReader r(j, "drive");
  DriveRequest d;
  const json* rounds = r.Array("rounds", kMaxCalls);
  r.Int("warmup", &d.warmup, 0, static_cast<int>(kMaxCalls));
  r.Uint("first_seq", &d.first_seq);
  r.Double("call_deadline_s", &d.call_deadline_s, 0.001, 3600);
  if (!r.ok()) return r.status();
  for (const json& e : *rounds) {
    WireReader rr(e, "drive round");
    Round round;
    uint64_t poison = 0;
    const json* seeds = rr.Array("seeds", 256);
    rr.Ints("order", &round.order, 4096);
    rr.Uint("poison", &poison);
    if (!rr.ok()) return rr.status();
    round.poison = static_cast<uint32_t>(poison);
    KF_RETURN_IF_ERROR(SeedsFromJson(seeds, max_sets, &round.seeds));
    KF_RETURN_IF_ERROR(SetsInRange(round.order, max_sets, "drive round"));
    d.rounds.push_back(std::move(round));
  }
  return d;
}

json DriveReply::ToJson() const {
  return {{"wall_us", wall_us},
          {"claimed_us", claimed_us},
          {"failures", FailuresToJson(failures)},
          {"inputs_changed", ChangedToJson(inputs_changed)},
          {"anomalies", anomalies},
          {"sm_clock_mhz", sm_clock_mhz},
          {"temperature_c", temperature_c},
          {"split_us", split.ToJson()}};
}

json DriveReply::Split::ToJson() const {
  return {{"round", round_us}, {"stage", stage_us}, {"verify", verify_us}, {"barrier", barrier_us}};
}

Result<DriveReply> DriveReply::Parse(const json& j, const std::string& what, size_t calls) {
  WireReader r(j, what);
  DriveReply d;
  r.Doubles("wall_us", &d.wall_us, kMaxCalls);
  r.Doubles("claimed_us", &d.claimed_us, kMaxCalls);
  const json* f = r.Array("failures", 4096);
  const json* c = r.Array("inputs_changed", 4096);
  r.Strings("anomalies", &d.anomalies, 4096);
  r.Doubles("sm_clock_mhz", &d.sm_clock_mhz, 2);
  r.Doubles("temperature_c", &d.temperature_c, 2);
  const json* split = r.Object("split_us");
  if (!r.ok()) return r.status();
  WireReader sr(*split, what + ": split_us");
  sr.Double("round", &d.split.round_us, 0);
  sr.Double("stage", &d.split.stage_us, 0);
  sr.Double("verify", &d.split.verify_us, 0);
  sr.Double("barrier", &d.split.barrier_us, 0);
  if (!sr.ok()) return sr.status();
  KF_RETURN_IF_ERROR(FailuresFromJson(f, &d.failures));
  KF_RETURN_IF_ERROR(ChangedFromJson(c, &d.inputs_changed));
  if (d.failures.empty() && d.inputs_changed.empty() && d.anomalies.empty() &&
      (d.wall_us.size() != calls || d.claimed_us.size() != calls)) {
    return Error(ErrorKind::kHarness,
                 fmt::format("{}: {} times for {} calls", what, d.wall_us.size(), calls));
  }
  return d;
}

// ---- candidate -----------------------------------------------------------

json CalibrateRequest::ToJson() const {
  return {{"op", op::kCalibrate},
          {"first_seq", first_seq},
          {"calls", calls},
          {"call_deadline_s", call_deadline_s}};
}

Result<CalibrateRequest> CalibrateRequest::Parse(const json& j) {
  WireReader r(j, "calibrate");
  CalibrateRequest c;
  r.Uint("first_seq", &c.first_seq);
  r.Int("calls", &c.calls, 0, 1 << 20);
  r.Double("call_deadline_s", &c.call_deadline_s, 0.001, 3600);
  if (!r.ok()) return r.status();
  return c;
}

json PathRequest::ToJson(const char* op_name) const { return {{"op", op_name}, {"path", path}}; }

Result<PathRequest> PathRequest::Parse(const json& j) {
  WireReader r(j, "path request");
  PathRequest p;
  r.String("path", &p.path, 4096);
  if (!r.ok()) return r.status();
  return p;
}

json RunRequest::ToJson() const { return {{"op", op::kRun}, {"set", set}}; }

Result<RunRequest> RunRequest::Parse(const json& j, int max_sets) {
  WireReader r(j, "run");
  RunRequest q;
  r.Int("set", &q.set, 0, max_sets - 1);
  if (!r.ok()) return r.status();
  return q;
}

json ServeRequest::ToJson() const {
  json j = {{"op", op::kServe}, {"calls", calls}};
  if (profile) j["profile"] = true;
  return j;
}

Result<ServeRequest> ServeRequest::Parse(const json& j) {
  WireReader r(j, "serve");
  ServeRequest s;
  r.Int("calls", &s.calls, 0, static_cast<int>(kMaxCalls));
  if (r.Has("profile")) r.Bool("profile", &s.profile);
  if (!r.ok()) return r.status();
  return s;
}

const std::vector<std::string>& ProfileMetricNames() {
  // What bounds the kernel first (time, memory, occupancy, L2), then where
  // its warps wait, then the SM pipes (the most passes).
  static const std::vector<std::string> kNames = {
      "gpu__time_duration.sum",
      "dram__bytes_read.sum",
      "dram__bytes_write.sum",
      "dram__throughput.avg.pct_of_peak_sustained_elapsed",
      "sm__warps_active.avg.pct_of_peak_sustained_active",
      "lts__t_sector_hit_rate.pct",
      "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
      "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
      "smsp__average_warps_issue_stalled_membar_per_issue_active.ratio",
      "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio",
      "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
      "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
      "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
      "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
      "sm__throughput.avg.pct_of_peak_sustained_elapsed",
  };
  return kNames;
}

json ServeReply::ToJson() const {
  json j = json::object();
  if (!profile.empty()) {
    json p = json::object();
    for (const auto& [name, value] : profile) p[name] = value;
    j["profile"] = p;
  }
  if (!profile_error.empty()) j["profile_error"] = profile_error.substr(0, kMaxText);
  return j;
}

Result<ServeReply> ServeReply::Parse(const json& j, const std::string& what) {
  WireReader r(j, what);
  ServeReply s;
  if (r.Has("profile_error")) r.String("profile_error", &s.profile_error, kMaxText);
  if (r.Has("profile")) {
    if (const json* p = r.Object("profile")) {
      const auto& names = ProfileMetricNames();
      if (p->size() > names.size()) r.Fail("profile: more metrics than were asked for");
      for (auto it = p->begin(); r.ok() && it != p->end(); ++it) {
        if (std::find(names.begin(), names.end(), it.key()) == names.end()) {
          r.Fail("profile: unknown metric '" + it.key().substr(0, 80) + "'");
        } else if (!it->is_number() || !std::isfinite(it->get<double>())) {
          r.Fail("profile: " + it.key() + " is not a finite number");
        } else {
          s.profile.emplace_back(it.key(), it->get<double>());
        }
      }
    }
  }
  if (!r.ok()) return r.status();
  return s;
}

// ---- replies -------------------------------------------------------------

json ErrorReply(const Status& status, int rank) {
  return {{"ok", false},
          {"kind", std::string(ErrorKindName(status.kind()))},
          {"error", status.message().substr(0, kMaxText)},
          {"rank", rank}};
}

Status ReplyStatus(const json& reply, const std::string& what) {
  if (!reply.is_object()) return Error(ErrorKind::kHarness, what + ": the reply is not an object");
  auto ok = reply.find("ok");
  if (ok == reply.end() || !ok->is_boolean()) {
    return Error(ErrorKind::kHarness, what + ": the reply has no boolean 'ok'");
  }
  if (ok->get<bool>()) return Status::Ok();
  WireReader r(reply, what);
  std::string kind, error;
  r.String("kind", &kind, 64);
  r.String("error", &error, kMaxText);
  if (!r.ok()) return r.status();
  ErrorKind k = ErrorKind::kHarness;
  if (kind == "runtime_error") k = ErrorKind::kRuntimeError;
  if (kind == "cancelled") k = ErrorKind::kCancelled;
  if (kind == "policy_violation") k = ErrorKind::kPolicyViolation;
  // A harness rank whose served group did not answer a call in time.
  if (kind == "deadlock") k = ErrorKind::kDeadlock;
  return Error(k, error);
}

}  // namespace kforge::eval::proto
