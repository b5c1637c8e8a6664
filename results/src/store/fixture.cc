#include "kforge/results/fixture.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kforge/core/hash.h"
#include "kforge/results/store.h"

namespace kforge::results {

namespace {

constexpr const char* kCategories[] = {"collective", "fused", "moe"};
constexpr Verdict kFailures[] = {Verdict::kCompileError, Verdict::kMismatch, Verdict::kRuntimeError,
                                 Verdict::kTimeout};

// A uniform number in [0,1) from the spec's seed and a label.
double Uniform(uint64_t seed, const std::string& label) {
  const std::string h = Sha256Hex(std::to_string(seed) + "|" + label);
  return static_cast<double>(std::stoull(h.substr(0, 13), nullptr, 16)) /
         static_cast<double>(1ull << 52);
}

std::string KernelSource(const std::string& task, int turn, double unroll) {
  return fmt::format(
      "// {} candidate, turn {}\n#include <cuda_runtime.h>\n#include \"kforge/abi.h\"\n\n"
      "__global__ void kf_kernel(const float* __restrict__ x, float* y, int n) {{\n"
      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  #pragma unroll {}\n"
      "  for (; i < n; i += gridDim.x * blockDim.x) y[i] = x[i] * 2.0f;  /* turn {} */\n"
      "}}\n\nextern \"C\" int kf_run(kf_ctx* ctx) {{\n  return 0;\n}}\n",
      task, turn, static_cast<int>(unroll * 8) + turn, turn);
}

nlohmann::json EvalDoc(const std::string& task, int world, Verdict verdict, double speedup,
                       bool emulated) {
  const std::string status(VerdictName(verdict));
  nlohmann::json doc = {{"schema", kEvalSchema}, {"status", status},
                        {"task", task},          {"dtype", "bf16"},
                        {"world", world},        {"emulated", emulated},
                        {"seconds", 3.5},        {"devices", std::vector<int>(world, 0)}};
  if (verdict == Verdict::kPassed) {
    doc["speedup"] = speedup;
    doc["message"] = fmt::format("passed: 5/5 trials; speedup {:.2f}x", speedup);
    doc["timing"] = {{{"size", "1MiB"},
                      {"bytes", 1 << 20},
                      {"speedup", speedup},
                      {"busbw_gbps", 40.0 * speedup},
                      {"baseline_busbw_gbps", 40.0}}};
  } else {
    doc["message"] = status + ": synthetic failure";
    doc["error"] = {{"phase", "correctness"}, {"rank", 1}, {"message", "synthetic " + status}};
  }
  return doc;
}

}  // namespace

Status WriteFixtureRun(const std::filesystem::path& run_dir, const FixtureSpec& spec) {
  KF_ASSIGN_OR_RETURN(auto store, RunStore::Open(run_dir));
  KF_ASSIGN_OR_RETURN(
      RunInfo run, store->CreateOrGetRun(spec.run_name, {{"fixture", true}, {"seed", spec.seed}},
                                         "0.1.0", "fixture-suite",
                                         {{"gpu", "NVIDIA H200"}, {"count", 8}, {"nvlink", true}}));
  int session_no = 0;
  const int total =
      static_cast<int>(spec.models.size() * spec.strategies.size() * spec.worlds.size()) *
      spec.tasks * spec.samples;
  for (size_t mi = 0; mi < spec.models.size(); ++mi) {
    const std::string& model = spec.models[mi];
    const bool emulated =
        std::count(spec.emulated_models.begin(), spec.emulated_models.end(), model) > 0;
    for (size_t si = 0; si < spec.strategies.size(); ++si) {
      for (int world : spec.worlds) {
        for (int t = 0; t < spec.tasks; ++t) {
          const std::string task = fmt::format("{:03d}_t{}", t + 1, t + 1);
          for (int sample = 0; sample < spec.samples; ++sample) {
            ++session_no;
            SessionKey key{model, task,   spec.strategies[si], sample,
                           world, "bf16", kCategories[t % 3]};
            KF_ASSIGN_OR_RETURN(int64_t sid, store->UpsertSession(run.id, key));
            // An unfinished run leaves its last tenth of sessions pending.
            if (!spec.finished && session_no > total * 9 / 10) continue;
            const std::string label =
                fmt::format("{}|{}|{}|{}|{}", model, key.strategy, world, task, sample);
            const double skill =
                0.85 - 0.25 * static_cast<double>(mi) + 0.05 * static_cast<double>(si);
            const bool correct = Uniform(spec.seed, label + "|c") < skill;
            const double speedup = std::round((0.5 + Uniform(spec.seed, label + "|s") *
                                                         (1.6 - 0.3 * static_cast<double>(mi))) *
                                              1000) /
                                   1000;
            const Verdict failure =
                kFailures[static_cast<int>(Uniform(spec.seed, label + "|f") * 4) % 4];
            KF_RETURN_IF_ERROR(store->SetSessionState(sid, "running"));
            int64_t best = 0;
            for (int turn = 0; turn < spec.turns; ++turn) {
              const bool last = turn == spec.turns - 1;
              TurnRecord tr;
              tr.session_id = sid;
              tr.index = turn;
              tr.prompt = fmt::format("Write a multi-GPU kernel for task {} (world {}).\nTurn {}.",
                                      task, world, turn);
              tr.reply = "Here is the kernel:\n```cuda\n" + KernelSource(task, turn, 0.5) + "```\n";
              tr.kernel = KernelSource(task, turn, Uniform(spec.seed, label));
              tr.usage.input_tokens = 1500 + 400 * turn;
              tr.usage.output_tokens = 800 + 37 * static_cast<int64_t>(mi);
              tr.usage.cost_usd = 0.002 * static_cast<double>(tr.usage.tokens()) / 1000 *
                                  (3.0 - static_cast<double>(mi));
              tr.latency_s = 12.5;
              tr.finish_reason = "stop";
              tr.created_at = 1.7e9 + session_no * 100 + turn;
              KF_ASSIGN_OR_RETURN(int64_t tid, store->AppendTurn(tr));
              const Verdict verdict =
                  last ? (correct ? Verdict::kPassed : failure) : Verdict::kMismatch;
              KF_ASSIGN_OR_RETURN(int64_t eid,
                                  store->RecordEvaluation(
                                      sid, tid, EvalDoc(task, world, verdict, speedup, emulated)));
              KF_RETURN_IF_ERROR(
                  store->SetTurnFeedback(tid, "Evaluation: " + std::string(VerdictName(verdict)) +
                                                  ". Fix the reported issue."));
              if (last || best == 0) best = eid;
            }
            KF_RETURN_IF_ERROR(store->SetBestEvaluation(sid, best));
            KF_RETURN_IF_ERROR(
                store->SetSessionState(sid, "done", correct ? "passed" : "turn budget"));
          }
        }
      }
    }
  }
  KF_RETURN_IF_ERROR(store->AppendEvent(run.id, "fixture", {{"sessions", session_no}}));
  if (spec.finished) KF_RETURN_IF_ERROR(store->FinishRun(run.id, "done"));
  return Status::Ok();
}

}  // namespace kforge::results
