// The phases of one evaluation at one size: allocate symmetric memory, set up
// the kernels, check correctness, time baseline and candidate interleaved.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "kforge/core/log.h"
#include "run/stats.h"
#include "session.h"

namespace kforge::eval {
namespace {

using nlohmann::json;

// Turns a failed group exchange into the result's error/timeout object.
Status Failed(EvalSession& s, const Status& st) {
  const GroupFailure& f = s.group->last_failure();
  if (st.kind() == ErrorKind::kDeadlock) {
    s.failure = {{"phase", f.phase}, {"deadline_s", f.deadline_s}, {"hung_ranks", f.hung_ranks}};
  } else {
    s.failure = {{"phase", f.phase.empty() ? "setup" : f.phase},
                 {"rank", f.rank},
                 {"message", st.message()}};
  }
  return st;
}

json AllocMessage(const EvalSession& s, const SizeSpec& size, bool check, int sets) {
  return {{"op", "alloc"},
          {"task_dir", s.task->dir.string()},
          {"dtype", std::string(DtypeName(s.dtype))},
          {"size", size.label},
          {"check", check},
          {"sets", sets}};
}

// alloc + peers + setup of the given kernel slots.
Status Prepare(EvalSession& s, const SizeSpec& size, bool check, int sets,
               const std::vector<std::string>& slots) {
  double dl = s.options->setup_deadline_s;
  auto alloc = s.group->All(AllocMessage(s, size, check, sets), dl, "setup");
  if (!alloc.ok()) return Failed(s, alloc.status());
  json handles = json::array();
  for (const auto& m : *alloc) handles.push_back(m.body.at("handle"));
  auto peers = s.group->All({{"op", "peers"}, {"handles", handles}}, dl, "setup");
  if (!peers.ok()) return Failed(s, peers.status());
  for (const auto& slot : slots) {
    auto r = s.group->All({{"op", "setup"}, {"slot", slot}}, dl, "setup");
    if (!r.ok()) return Failed(s, r.status());
  }
  return Status::Ok();
}

Status Release(EvalSession& s, const std::vector<std::string>& slots) {
  for (const auto& slot : slots) {
    auto r =
        s.group->All({{"op", "teardown"}, {"slot", slot}}, s.options->setup_deadline_s, "teardown");
    if (!r.ok()) return Failed(s, r.status());
  }
  auto r = s.group->All({{"op", "free"}}, s.options->setup_deadline_s, "teardown");
  if (!r.ok()) return Failed(s, r.status());
  return Status::Ok();
}

json InputsChanged(const std::vector<Message>& replies) {
  json out = json::array();
  for (size_t r = 0; r < replies.size(); ++r) {
    for (const auto& name : replies[r].body.value("inputs_changed", json::array())) {
      out.push_back({{"rank", r}, {"input", name}});
    }
  }
  return out;
}

std::string ChangedMessage(const json& changed) {
  std::string m = "the kernel modified its inputs:";
  for (const auto& c : changed)
    m += " " + c["input"].get<std::string>() + " on rank " + std::to_string(c["rank"].get<int>()) +
         ";";
  return m;
}

// Reads one rank's outputs from the memfd its worker sent.
Result<std::vector<std::vector<char>>> ReadOutputs(const Message& m) {
  if (m.fds.empty()) return Error(ErrorKind::kHarness, "worker sent no outputs");
  const json& layout = m.body.at("layout");
  size_t total = 0;
  for (const auto& e : layout)
    total = std::max(total, e["offset"].get<size_t>() + e["nbytes"].get<size_t>());
  std::vector<std::vector<char>> out;
  void* p = mmap(nullptr, std::max<size_t>(total, 1), PROT_READ, MAP_SHARED, m.fds[0], 0);
  for (int fd : m.fds) close(fd);
  if (p == MAP_FAILED) return Error(ErrorKind::kHarness, "mmap of worker outputs failed");
  for (const auto& e : layout) {
    const char* b = static_cast<const char*>(p) + e["offset"].get<size_t>();
    out.emplace_back(b, b + e["nbytes"].get<size_t>());
  }
  munmap(p, std::max<size_t>(total, 1));
  return out;
}

}  // namespace

Status RunCheckSize(EvalSession& s, const SizeSpec& size) {
  KF_ASSIGN_OR_RETURN(Problem p, Instantiate(*s.task, s.world, s.dtype, size, true));
  KF_RETURN_IF_ERROR(Prepare(s, size, true, 1, {"candidate"}));
  for (int trial = 0; trial < s.options->trials; ++trial) {
    uint64_t seed = s.NewSeed();
    auto in = s.group->All({{"op", "inputs"}, {"seed", seed}}, s.options->check_deadline_s,
                           "correctness");
    if (!in.ok()) return Failed(s, in.status());
    auto run = s.group->All({{"op", "run"}, {"slot", "candidate"}, {"mode", "memfd"}},
                            s.options->check_deadline_s, "correctness");
    if (!run.ok()) return Failed(s, run.status());

    json check = {{"size", size.label}, {"kind", "check"}, {"trial", trial}};
    json changed = InputsChanged(*run);
    std::vector<std::vector<std::vector<char>>> outputs;
    for (const auto& m : *run) {
      KF_ASSIGN_OR_RETURN(auto o, ReadOutputs(m));
      outputs.push_back(std::move(o));
    }
    KF_ASSIGN_OR_RETURN(HostInputs inputs, GenerateAllInputs(p, seed));
    std::vector<std::vector<const void*>> ptrs(s.world);
    for (int r = 0; r < s.world; ++r) {
      for (const auto& b : inputs[r]) ptrs[r].push_back(b.data());
    }
    KF_ASSIGN_OR_RETURN(OracleIo io, BuildOracleIo(p, seed, ptrs));
    if (Status st = RunOracle(p, io); !st.ok()) {
      return Error(ErrorKind::kHarness, "the task's oracle failed: " + st.message());
    }
    json mismatches = json::array();
    for (int r = 0; r < s.world; ++r) {
      for (size_t o = 0; o < p.outputs.size(); ++o) {
        if (p.outputs[o].only_rank >= 0 && p.outputs[o].only_rank != r) continue;
        json mm = CheckAgainstOracle(p, r, static_cast<int>(o), outputs[r][o].data(), io, inputs);
        if (!mm.is_null()) mismatches.push_back(std::move(mm));
      }
    }
    check["passed"] = mismatches.empty() && changed.empty();
    check["mismatches"] = mismatches;
    if (!changed.empty()) check["inputs_changed"] = changed;
    s.checks.push_back(check);
    if (!check["passed"].get<bool>()) {
      (void)Release(s, {"candidate"});
      return Error(ErrorKind::kMismatch,
                   changed.empty() ? "outputs differ from the oracle at size " + size.label
                                   : ChangedMessage(changed));
    }
    ++s.trials_passed;
  }
  return Release(s, {"candidate"});
}

Status RunBenchSize(EvalSession& s, const SizeSpec& size) {
  KF_ASSIGN_OR_RETURN(Problem p, Instantiate(*s.task, s.world, s.dtype, size, false));
  size_t per_set = 0;
  for (const auto& t : p.inputs) per_set += t.nbytes;
  for (const auto& t : p.outputs) per_set += t.nbytes;
  // Rotate through enough copies that consecutive iterations never find their
  // data in L2 (at least 3x its size), capped to bound memory.
  int sets = static_cast<int>(
      std::clamp<size_t>((3 * s.l2_bytes + per_set - 1) / std::max<size_t>(per_set, 1), 1, 64));
  if (!s.options->timing) sets = 1;
  KF_RETURN_IF_ERROR(Prepare(s, size, false, sets, {"baseline", "candidate"}));
  const double dl = s.options->check_deadline_s;

  uint64_t seed = s.NewSeed();
  auto in = s.group->All({{"op", "inputs"}, {"seed", seed}}, dl, "correctness");
  if (!in.ok()) return Failed(s, in.status());
  auto ref =
      s.group->All({{"op", "run"}, {"slot", "baseline"}, {"mode", "keep_ref"}}, dl, "baseline");
  if (!ref.ok()) {
    Status st = Failed(s, ref.status());
    return Error(ErrorKind::kHarness, "the baseline failed: " + st.message());
  }
  auto cand = s.group->All({{"op", "run"}, {"slot", "candidate"}, {"mode", "compare_ref"}}, dl,
                           "correctness");
  if (!cand.ok()) return Failed(s, cand.status());
  json mismatches = json::array();
  for (const auto& m : *cand) {
    for (const auto& mm : m.body.value("mismatches", json::array())) mismatches.push_back(mm);
  }
  json changed = InputsChanged(*cand);
  json check = {{"size", size.label},
                {"kind", "bench"},
                {"trial", 0},
                {"passed", mismatches.empty() && changed.empty()},
                {"mismatches", mismatches}};
  if (!changed.empty()) check["inputs_changed"] = changed;
  s.checks.push_back(check);
  if (!check["passed"].get<bool>()) {
    (void)Release(s, {"baseline", "candidate"});
    return Error(ErrorKind::kMismatch,
                 changed.empty() ? "outputs differ from the baseline's at size " + size.label
                                 : ChangedMessage(changed));
  }

  if (s.options->timing) {
    // A short probe sizes the warm-up: at least 20 iterations and 300 ms.
    auto probe = s.group->All({{"op", "time"},
                               {"slots", {"baseline", "candidate"}},
                               {"warmup_iters", 2},
                               {"iters", 3},
                               {"block", 3}},
                              s.options->timing_deadline_s, "timing");
    if (!probe.ok()) return Failed(s, probe.status());
    double per_iter_us = 0;
    for (const char* k : {"baseline", "candidate"}) {
      std::vector<std::vector<double>> by_rank;
      for (const auto& m : *probe)
        by_rank.push_back(m.body["results"][k]["event_us"].get<std::vector<double>>());
      per_iter_us +=
          Quantile(MaxOverRanks(by_rank), 0.5) + 20.0;  // + harness overhead per iteration
    }
    int warmup = static_cast<int>(std::clamp(300e3 / std::max(per_iter_us, 1.0), 20.0, 5000.0));
    int iters = static_cast<int>(
        std::clamp(s.options->timing_deadline_s * 0.3e6 / std::max(per_iter_us, 1.0), 20.0, 200.0));
    auto timed = s.group->All({{"op", "time"},
                               {"slots", {"baseline", "candidate"}},
                               {"warmup_iters", warmup},
                               {"iters", iters},
                               {"block", 10},
                               {"poison_final_block", true}},
                              s.options->timing_deadline_s, "timing");
    if (!timed.ok()) return Failed(s, timed.status());
    json entry = {
        {"size", size.label}, {"bytes", p.perf_bytes}, {"sets", sets}, {"warmup_iters", warmup}};
    TimingStats stats[2];
    json warnings = json::array();
    const char* names[2] = {"baseline", "candidate"};
    for (int k = 0; k < 2; ++k) {
      std::vector<std::vector<double>> ev, host;
      for (const auto& m : *timed) {
        ev.push_back(m.body["results"][names[k]]["event_us"].get<std::vector<double>>());
        host.push_back(m.body["results"][names[k]]["host_us"].get<std::vector<double>>());
      }
      stats[k] = Summarize(MaxOverRanks(ev), MaxOverRanks(host));
      entry[names[k]] = stats[k].ToJson();
      // The host clock spans kf_run to a device-wide sync: far more than the
      // stream's events means work was left outside ctx->stream.
      if (stats[k].host_median_us > 2 * stats[k].median_us + 100) {
        warnings.push_back(std::string(names[k]) + ": host time " +
                           std::to_string(stats[k].host_median_us) + " us far exceeds event time " +
                           std::to_string(stats[k].median_us) + " us: work outside ctx->stream?");
      }
    }
    // Re-validate what the candidate's final timed calls wrote.
    std::vector<json> reval;
    for (const auto& m : *timed) {
      reval.push_back(
          {{"op", "revalidate"}, {"sets", m.body["results"]["candidate"]["final_sets"]}});
    }
    auto rv = s.group->Each(reval, dl, "timing");
    if (!rv.ok()) return Failed(s, rv.status());
    json rv_mismatches = json::array();
    for (const auto& m : *rv) {
      for (const auto& mm : m.body.value("mismatches", json::array())) rv_mismatches.push_back(mm);
    }
    json rv_changed = InputsChanged(*rv);
    entry["revalidated"] = rv_mismatches.empty() && rv_changed.empty();
    double b = stats[0].median_us, c = stats[1].median_us;
    entry["speedup"] = c > 0 ? b / c : 0;
    entry["algbw_gbps"] = c > 0 ? p.perf_bytes / (c * 1e-6) / 1e9 : 0;
    entry["busbw_gbps"] = c > 0 ? p.perf_bytes / (c * 1e-6) / 1e9 * p.busbw_factor : 0;
    entry["baseline_busbw_gbps"] = b > 0 ? p.perf_bytes / (b * 1e-6) / 1e9 * p.busbw_factor : 0;
    entry["warnings"] = warnings;
    s.timing.push_back(entry);
    if (!entry["revalidated"].get<bool>()) {
      s.checks.push_back({{"size", size.label},
                          {"kind", "timed"},
                          {"trial", 0},
                          {"passed", false},
                          {"mismatches", rv_mismatches},
                          {"inputs_changed", rv_changed}});
      (void)Release(s, {"baseline", "candidate"});
      return Error(ErrorKind::kMismatch,
                   "outputs of timed calls at size " + size.label +
                       " differ from the baseline's (they pass only when run in isolation)");
    }
  }
  return Release(s, {"baseline", "candidate"});
}

}  // namespace kforge::eval
