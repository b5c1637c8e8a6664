#include "kforge/evaluator/task_card.h"

#include <fmt/format.h>

#include <string_view>

#include "kforge/abi_limits.h"

namespace kforge::eval {
namespace {

std::string Shape(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string Symbolic(const std::vector<std::string>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + shape[i];
  return s + "]";
}

std::string Bytes(double b) {
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.3g} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.3g} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.3g} KiB", b / 1024.0);
  return fmt::format("{} B", b);
}

std::string InitText(const InitSpec& init) {
  switch (init.kind) {
    case InitSpec::Kind::kNormal:
    case InitSpec::Kind::kUniform: {
      const bool normal = init.kind == InitSpec::Kind::kNormal;
      auto one = [&](const std::string& a, const std::string& b) {
        return normal ? fmt::format("normal(mean {}, std {})", a, b)
                      : fmt::format("uniform in [{}, {})", a, b);
      };
      // Per-column offsets (normal): a column's values share a random shift.
      std::string columns =
          normal && init.column_std != "0"
              ? fmt::format(
                    ", plus a normal(0, std {}) offset per column (last dimension), the "
                    "same on every rank",
                    init.column_std)
              : "";
      if (init.distinct) columns += "; no two values of a row (last dimension) are equal";
      if (init.pieces.empty())
        return (normal ? one(init.mean, init.std) : one(init.low, init.high)) + columns;
      std::string text = "by element range:";
      std::string from = "0";
      for (const InitPieceSpec& p : init.pieces) {
        text +=
            fmt::format(" [{}, {}) {};", from, p.until.empty() ? "end" : p.until, one(p.a, p.b));
        from = p.until;
      }
      text.pop_back();
      return text + columns;
    }
    case InitSpec::Kind::kInt:
      return fmt::format("integers in [{}, {}]", init.int_low, init.int_high);
    case InitSpec::Kind::kPermutation:
      return "a random permutation of 0..numel-1";
    case InitSpec::Kind::kCustom:
      return "task-specific generator";
  }
  return "";
}

std::string DtypeText(const std::string& spec, Dtype t) {
  return spec == "T" ? fmt::format("T = {}", DtypeName(t)) : spec;
}

void SizesTable(std::string& s, const Task& task, int world, Dtype dtype,
                const std::vector<SizeSpec>& sizes, bool is_check) {
  s += "| size | variables |";
  for (const auto& t : task.inputs) s += " " + t.name + " |";
  for (const auto& t : task.outputs) s += " " + t.name + " |";
  s += is_check ? "\n" : " bytes (perf) |\n";
  s += "|---|---|";
  for (size_t i = 0; i < task.inputs.size() + task.outputs.size() + (is_check ? 0 : 1); ++i)
    s += "---|";
  s += "\n";
  for (const SizeSpec& size : sizes) {
    auto p = Instantiate(task, world, dtype, size, is_check);
    if (!p.ok()) {
      s += fmt::format("| {} | (does not instantiate: {}) |\n", size.label, p.status().message());
      continue;
    }
    std::string vars;
    for (const auto& [name, expr] : size.vars) {
      vars += fmt::format("{}{} = {}", vars.empty() ? "" : ", ", name, p->vars.at(name));
    }
    s += fmt::format("| {} | {} | ", size.label, vars);
    for (const auto& t : p->inputs) s += Shape(t.shape) + " | ";
    for (const auto& t : p->outputs) s += Shape(t.shape) + " | ";
    if (is_check) {
      s.pop_back();  // the trailing space after the last cell
    } else {
      s += fmt::format("{} |", Bytes(p->perf_bytes));
    }
    s += "\n";
  }
}

}  // namespace

std::string RenderTaskCard(const Task& task, int world, Dtype dtype) {
  std::string s;
  s += fmt::format("# Task {}: {}\n\n", task.key, task.title);
  std::string worlds, dtypes;
  for (int w : task.world_sizes) worlds += (worlds.empty() ? "" : ", ") + std::to_string(w);
  for (Dtype d : task.dtypes) dtypes += (dtypes.empty() ? "" : ", ") + std::string(DtypeName(d));
  s += fmt::format("- Category: {}\n", task.category);
  s += fmt::format("- World size: W = {} ranks, one GPU each (the task supports W in {{{}}})\n",
                   world, worlds);
  s += fmt::format("- Element type: T = {} ({} bytes; the task supports {})\n\n", DtypeName(dtype),
                   DtypeSize(dtype), dtypes);
  s += "## Description\n\n" + task.description;
  if (!task.description.empty() && task.description.back() != '\n') s += "\n";

  s += "\n## What each rank holds\n\n";
  s += "Every tensor exists on every rank (symmetric memory: `t.peers[r]` is rank r's copy). "
       "Shapes are "
       "row-major and contiguous.\n\n";
  s += "| role | name | dtype | shape | values |\n|---|---|---|---|---|\n";
  for (const auto& t : task.inputs) {
    s +=
        fmt::format("| input (read-only) | {} | {} | {} | {}{} |\n", t.name,
                    DtypeText(t.dtype, dtype), Symbolic(t.shape), InitText(t.init),
                    t.same_on_all_ranks ? "; the same on every rank" : "; different on every rank");
  }
  for (const auto& t : task.outputs) {
    std::string checked =
        t.ranks.empty() ? "checked on every rank" : "checked only on rank " + t.ranks;
    if (!t.count.empty()) {
      checked += fmt::format(
          "; the first dimension is a capacity: write the number of valid rows to `{}`, and only "
          "those first rows are checked (rows past them are never read)",
          t.count);
    }
    s += fmt::format("| output | {} | {} | {} | {} |\n", t.name, DtypeText(t.dtype, dtype),
                     Symbolic(t.shape), checked);
  }
  if (!task.params.empty()) {
    s += "\nParams (also in `ctx->param_values`, by name via `kf_param`):\n\n";
    for (const auto& [name, v] : task.params) s += fmt::format("- `{}` = {}\n", name, v);
  }
  s += fmt::format("\n### Check sizes (correctness, W = {})\n\n", world);
  SizesTable(s, task, world, dtype, task.check_sizes, true);
  s += fmt::format("\n### Bench sizes (timing, W = {})\n\n", world);
  SizesTable(s, task, world, dtype, task.bench_sizes, false);

  s += "\n## Correctness\n\n";
  s += "Outputs are compared with an fp64 CPU oracle at every check size, over several trials with "
       "fresh "
       "random inputs (the seeds are secret), and with the baseline's outputs at the bench sizes. "
       "An element "
       "passes if |got - expected| <= atol + rtol * |expected|; NaN and Inf never pass.\n\n";
  for (const auto& t : task.outputs) {
    Dtype dt = dtype;
    if (t.dtype != "T") {
      if (auto parsed = ParseDtype(t.dtype); parsed.ok()) dt = *parsed;
    }
    ToleranceSpec tol;
    bool exact = false;
    if (t.tolerance) {
      tol = *t.tolerance;
    } else if (auto it = task.tolerance.find(dt); it != task.tolerance.end()) {
      tol = it->second;
    } else {
      exact = true;
    }
    s += exact ? fmt::format("- `{}` ({}): exact\n", t.name, DtypeName(dt))
               : fmt::format("- `{}` ({}): atol = {}, rtol = {}{}\n", t.name, DtypeName(dt),
                             tol.atol, tol.rtol,
                             tol.rms == "0"
                                 ? ""
                                 : fmt::format(", and relative RMS over the output <= {} (outputs "
                                               "of {}+ elements)",
                                               tol.rms, kRmsMinElements));
  }
  s += "\nOutputs are overwritten with 0xFF bytes before every call: write every element. Inputs "
       "must be "
       "unchanged after the call.\n";

  s += "\n## Timing\n\n";
  s += "The harness times `kf_run` at each bench size: from a barrier across ranks to the end of "
       "every rank's "
       "`ctx->stream`, the slowest rank counting, many iterations after a warm-up. The baseline is "
       "the task's "
       "reference kernel (NCCL through the harness collectives), timed in the same session.\n\n";
  s += "- speedup = baseline median time / your median time, per bench size; the score is the "
       "geometric mean "
       "over bench sizes\n";
  s += fmt::format("- algbw = bytes / time, with bytes = `{}`\n", task.perf_bytes);
  s += fmt::format("- busbw = algbw * `{}` (nccl-tests convention)\n", task.perf_busbw_factor);

  s += "\n## Policy\n\n";
  auto allowed = [](bool b) { return b ? "allowed" : "not allowed"; };
  s += fmt::format(
      "- Harness collectives (`kf_all_reduce`, `kf_all_gather`, ..., `kf_barrier`): {}\n",
      allowed(task.policy.harness_collectives));
  s += fmt::format("- NCCL: {}\n", allowed(task.policy.nccl));
  s += fmt::format("- cuBLAS: {}\n", allowed(task.policy.cublas));
  s += fmt::format("- cuFFT: {}\n", allowed(task.policy.cufft));
  s += fmt::format("- cuDNN: {}\n", allowed(task.policy.cudnn));
  s += "- Always allowed: your own CUDA kernels, loads and stores to peers' buffers through "
       "`peers[r]`, the "
       "symmetric workspace and the signal pad (`kf_signal` / `kf_wait`).\n";

  s += "\n## Contract\n\n";
  s += fmt::format(
      "Write one `.cu` file against `kforge/kernel.h` (ABI version {}) that defines `kf_run` "
      "(required) and, if it needs them, `kf_setup` and `kf_teardown` (optional). ",
      KF_ABI_VERSION);
  s += "Tensors, params and buffers come in `kf_ctx`; inputs and outputs are in the "
       "order "
       "listed above. All device work of `kf_run` must be on `ctx->stream` when it returns; "
       "synchronising "
       "ranks is the kernel's job. ";
  s += task.workspace.empty()
           ? "The symmetric workspace holds 2 x the largest tensor + 1 MiB.\n"
           : fmt::format("The symmetric workspace holds `{}` bytes.\n", task.workspace);
  return s;
}

}  // namespace kforge::eval
