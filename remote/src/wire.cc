#include "wire.h"

#include <fmt/format.h>

#include "kforge/evaluator/canary.h"

namespace kforge::remote::wire {
namespace {

using nlohmann::json;

// Bounds on what one request may ask for; the body's size is bounded by the
// server's upload limit before this runs.
constexpr size_t kMaxName = 256;
constexpr int kMaxWorld = 64;

Status Field(std::string_view name, std::string_view what) {
  return Error(ErrorKind::kInvalidInput, fmt::format("job field '{}': {}", name, what));
}

Status GetString(const json& obj, const char* name, size_t max, bool required, std::string* out) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) {
    return required ? Field(name, "missing") : Status::Ok();
  }
  if (!it->is_string()) return Field(name, "expected a string");
  const auto& s = it->get_ref<const std::string&>();
  if (s.size() > max) return Field(name, fmt::format("longer than {} bytes", max));
  *out = s;
  return Status::Ok();
}

}  // namespace

json JobRequestJson(const JobRequest& r) {
  return {{"schema", kJobSchema},
          {"id", r.id},
          {"task_suite_hash", r.task_suite_hash},
          {"kforge_version", r.kforge_version},
          {"job",
           {{"task", r.job.task},
            {"source", r.job.source},
            {"kernel_name", r.job.kernel_name},
            {"world", r.job.world},
            {"dtype", r.job.dtype},
            {"compile_only", r.job.compile_only},
            {"profile", r.job.profile},
            {"canary", r.job.canary},
            {"timing_cap_s", r.job.timing_cap_s}}}};
}

Result<JobRequest> ParseJobRequest(std::string_view body) {
  json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object())
    return Error(ErrorKind::kInvalidInput, "the body is not a JSON object");
  if (doc.value("schema", std::string()) != kJobSchema) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("field 'schema': expected \"{}\"", kJobSchema));
  }
  JobRequest r;
  KF_RETURN_IF_ERROR(GetString(doc, "id", kMaxName, false, &r.id));
  KF_RETURN_IF_ERROR(GetString(doc, "task_suite_hash", kMaxName, true, &r.task_suite_hash));
  KF_RETURN_IF_ERROR(GetString(doc, "kforge_version", kMaxName, false, &r.kforge_version));
  auto it = doc.find("job");
  if (it == doc.end() || !it->is_object()) return Field("job", "expected an object");
  const json& j = *it;
  KF_RETURN_IF_ERROR(GetString(j, "task", kMaxName, true, &r.job.task));
  // The source's size is bounded by the upload limit.
  KF_RETURN_IF_ERROR(GetString(j, "source", std::string::npos, true, &r.job.source));
  KF_RETURN_IF_ERROR(GetString(j, "kernel_name", kMaxName, false, &r.job.kernel_name));
  KF_RETURN_IF_ERROR(GetString(j, "dtype", 16, false, &r.job.dtype));
  if (auto w = j.find("world"); w != j.end() && !w->is_null()) {
    if (!w->is_number_integer()) return Field("world", "expected an integer");
    const int64_t world = w->get<int64_t>();
    if (world < 0 || world > kMaxWorld)
      return Field("world", fmt::format("not in 0..{}", kMaxWorld));
    r.job.world = static_cast<int>(world);
  }
  if (auto c = j.find("compile_only"); c != j.end() && !c->is_null()) {
    if (!c->is_boolean()) return Field("compile_only", "expected true or false");
    r.job.compile_only = c->get<bool>();
  }
  // Absent from an older client's job: no profile.
  if (auto p = j.find("profile"); p != j.end() && !p->is_null()) {
    if (!p->is_boolean()) return Field("profile", "expected true or false");
    r.job.profile = p->get<bool>();
  }
  // Absent from an older client's job: no canary.
  KF_RETURN_IF_ERROR(GetString(j, "canary", 64, false, &r.job.canary));
  if (!r.job.canary.empty() && !eval::IsCanaryToken(r.job.canary))
    return Field("canary", "expected \"kforge-canary-\" and 32 lower-case hex digits");
  // Absent from an older client's job (or 0): the server's evaluator's cap.
  if (auto c = j.find("timing_cap_s"); c != j.end() && !c->is_null()) {
    if (!c->is_number()) return Field("timing_cap_s", "expected a number of seconds");
    const double cap = c->get<double>();
    if (!eval::TimingCapAllowed(cap))
      return Field("timing_cap_s", fmt::format("expected 0 (the server's default) or {}-{} seconds",
                                               eval::kMinTimingCapS, eval::kMaxTimingCapS));
    r.job.timing_cap_s = cap;
  }
  if (r.job.kernel_name.empty()) r.job.kernel_name = "kernel.cu";
  return r;
}

std::string ErrorBody(std::string_view code, std::string_view message) {
  return json{{"schema", kErrorSchema},
              {"error", {{"code", std::string(code)}, {"message", std::string(message)}}}}
      .dump();
}

void ParseErrorBody(std::string_view body, std::string* code, std::string* message) {
  code->clear();
  message->clear();
  json doc = json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return;
  auto it = doc.find("error");
  if (it == doc.end() || !it->is_object()) return;
  if (auto c = it->find("code"); c != it->end() && c->is_string()) *code = c->get<std::string>();
  if (auto m = it->find("message"); m != it->end() && m->is_string())
    *message = m->get<std::string>();
}

}  // namespace kforge::remote::wire
