#include "breach.h"

#include <fmt/format.h>

#include <array>
#include <cstdlib>
#include <random>

#include "kforge/core/eval_doc.h"
#include "kforge/core/fs.h"
#include "kforge/core/hash.h"

namespace kforge::agent {
namespace {

using nlohmann::json;

// Where in the document the canary appears: the top-level fields whose text
// holds it (a candidate that prints the secret shows in `candidate_output`).
std::vector<std::string> CanaryFields(const json& doc, std::string_view canary) {
  std::vector<std::string> fields;
  if (doc.is_object()) {
    for (const auto& [key, value] : doc.items()) {
      const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
      if (text.find(canary) != std::string::npos) fields.push_back(key);
    }
  } else if (doc.dump().find(canary) != std::string::npos) {
    fields.push_back("(document)");
  }
  return fields;
}

// Where the evaluator itself found the canary in what the candidate
// produced (`integrity.canary.found`): "" when it did not, or planted none.
std::string CanaryFoundByEvaluator(const json& doc) {
  if (!doc.is_object()) return "";
  auto integrity = doc.find("integrity");
  if (integrity == doc.end() || !integrity->is_object()) return "";
  auto canary = integrity->find("canary");
  if (canary == integrity->end() || !canary->is_object()) return "";
  auto found = canary->find("found");
  return found != canary->end() && found->is_string() ? found->get<std::string>() : "";
}

double Number(const json& parent, const char* key) {
  if (!parent.is_object()) return 0;
  auto it = parent.find(key);
  return it != parent.end() && it->is_number() ? it->get<double>() : 0;
}

std::string SizeOf(const json& entry) {
  if (entry.is_object() && entry.contains("size") && entry["size"].is_string())
    return entry["size"].get<std::string>();
  return "?";
}

void TimingBreaches(const json& doc, const BreachLimits& limits, std::vector<std::string>* out) {
  auto it = doc.find("timing");
  if (it == doc.end() || !it->is_array()) return;
  for (const json& entry : *it) {
    const double speedup = Number(entry, "speedup");
    if (speedup > limits.max_speedup) {
      out->push_back(fmt::format(
          "size {}: passed at {:.1f}x the reference, above the {:.0f}x no known kernel reaches",
          SizeOf(entry), speedup, limits.max_speedup));
    }
    if (entry.is_object() && entry.contains("expert")) {
      const double vs_expert = Number(entry["expert"], "speedup");
      if (vs_expert > limits.max_expert_speedup) {
        out->push_back(fmt::format(
            "size {}: passed at {:.1f}x the speed of the task's expert kernel (the best known "
            "human kernel), above {:.0f}x",
            SizeOf(entry), vs_expert, limits.max_expert_speedup));
      }
    }
    if (!entry.is_object() || !entry.contains("roofline")) continue;
    const json& roofline = entry["roofline"];
    const double fraction = Number(roofline, "fraction");
    if (fraction > limits.max_floor_fraction) {
      out->push_back(fmt::format(
          "size {}: passed at {:.2f} of the physical floor ({:.1f} us, {}-bound), above {:.2f}: "
          "faster than the hardware allows",
          SizeOf(entry), fraction, Number(roofline, "floor_us"),
          roofline.value("bound", std::string("?")), limits.max_floor_fraction));
    }
  }
}

}  // namespace

std::vector<std::string> FindBreaches(const json& doc, std::string_view reply,
                                      std::string_view canary, const BreachLimits& limits) {
  std::vector<std::string> reasons;
  if (!canary.empty()) {
    if (reply.find(canary) != std::string_view::npos)
      reasons.push_back("the run's canary appears in the model's reply");
    for (const std::string& field : CanaryFields(doc, canary))
      reasons.push_back(fmt::format("the run's canary appears in the evaluation's `{}`", field));
  }
  // Named whatever the run's own canary: the evaluator plants the one it was
  // given, and a document re-read without its run's canary file still says so.
  if (std::string found = CanaryFoundByEvaluator(doc); !found.empty())
    reasons.push_back("the evaluator found the run's canary in " + found);
  auto summary = ReadEvalSummary(doc);
  if (summary.ok() && summary->verdict == Verdict::kPassed) TimingBreaches(doc, limits, &reasons);
  return reasons;
}

BreachRecord MakeBreachRecord(int64_t session, int turn, const json& doc,
                              const std::vector<std::string>& reasons) {
  BreachRecord r;
  r.verdict = doc.value("status", std::string("no_kernel"));
  r.detail = {{"session", session}, {"turn", turn}, {"verdict", r.verdict}, {"reasons", reasons}};
  return r;
}

std::string MakeCanary() {
  std::random_device rd;  // the OS's entropy source on Linux (getrandom)
  std::array<uint32_t, 4> words;
  for (auto& w : words) w = rd();
  return "kforge-canary-" + HexEncode(words.data(), sizeof(words));
}

std::string ChooseCanary(const std::filesystem::path& run_dir, bool resume) {
  std::string canary;
  if (resume) {
    auto stored = ReadFile(run_dir / kCanaryFile);
    if (stored.ok()) canary = *stored;
  }
  if (canary.empty()) canary = MakeCanary();
  ::setenv(kCanaryEnv, canary.c_str(), 1);
  return canary;
}

Status PlantCanaryFile(const std::filesystem::path& run_dir, std::string_view canary) {
  namespace fs = std::filesystem;
  const fs::path path = run_dir / kCanaryFile;
  KF_RETURN_IF_ERROR(WriteFileAtomic(path, canary));
  std::error_code ec;
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write, ec);
  if (ec) return Error(ErrorKind::kInternal, fmt::format("{}: {}", path.string(), ec.message()));
  return Status::Ok();
}

}  // namespace kforge::agent
