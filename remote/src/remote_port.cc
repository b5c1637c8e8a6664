// RemoteEvalService: one slot of an eval-server, as an eval::EvalService. Every
// failure that is the slot's and not the job's becomes kSlotLost, so the run
// requeues the job on another slot instead of ending the session.
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <optional>

#include "http.h"
#include "kforge/core/eval_doc.h"
#include "kforge/remote/client.h"
#include "kforge/remote/rendezvous.h"
#include "liveness.h"
#include "wire.h"

namespace kforge::remote {
namespace {

Status Lost(const std::string& label, const std::string& what) {
  return Error(ErrorKind::kSlotLost, fmt::format("evaluation server {}: {}", label, what));
}

class RemoteEvalService final : public eval::EvalService {
 public:
  explicit RemoteEvalService(RemotePortOptions o) : o_(std::move(o)) {
    if (o_.label.empty()) o_.label = o_.url;
  }

  Result<nlohmann::json> Evaluate(const eval::EvalRequest& job) override {
    std::string url = o_.url;
    if (!o_.registration.empty()) {
      // The file is the server's word on where it is now; without it the
      // server has drained or gone (a requeued Slurm task writes it again).
      auto reg = ReadRegistration(o_.registration);
      if (!reg.ok()) {
        return Lost(o_.label, fmt::format("no longer registered ({} is gone or unreadable)",
                                          o_.registration.string()));
      }
      url = reg->url;
    }
    wire::JobRequest request;
    request.job = job;
    request.task_suite_hash = o_.task_suite_hash;
    request.kforge_version = kforge::Version();
    request.id = fmt::format("{}-{}", job.kernel_name, ++sequence_);
    HttpCall call;
    call.method = "POST";
    call.url = url + "/v1/evaluate";
    call.token = o_.token;
    call.body = wire::JobRequestJson(request).dump();
    call.total_timeout_s = o_.timeout_s;
    std::optional<LivenessWatch> watch;
    if (o_.liveness_s > 0) {
      watch.emplace(url, o_.liveness_s);
      call.keep_going = [&watch] { return watch->alive(); };
    }
    Result<HttpReply> reply = Send(call);
    if (!reply.ok() && reply.status().kind() == ErrorKind::kCancelled) {
      return Lost(o_.label, fmt::format("no answer to its health checks for {:.0f} s while the "
                                        "job ran (stopped, wedged or cut off)",
                                        o_.liveness_s));
    }
    if (!reply.ok()) {
      // A refused connection, a reset mid-job, a timeout: the slot, not the job.
      return Lost(o_.label, reply.status().message());
    }
    std::string code, message;
    wire::ParseErrorBody(reply->body, &code, &message);
    const int http = reply->status;
    const std::string said =
        fmt::format("HTTP {} {}: {}", http, code.empty() ? "-" : code, message);
    if (http == 200) {
      nlohmann::json doc = nlohmann::json::parse(reply->body, nullptr, false);
      if (doc.is_discarded())
        return Lost(o_.label, "the answer is not a kforge.eval/1 document: not JSON");
      if (Result<EvalSummary> summary = ReadEvalSummary(doc); !summary.ok())
        return Lost(o_.label,
                    "the answer is not a kforge.eval/1 document: " + summary.status().message());
      return doc;
    }
    if (http == 429 || http == 503) {
      Status st = Lost(o_.label, said);
      if (!reply->retry_after.empty()) {
        char* end = nullptr;
        const double s = std::strtod(reply->retry_after.c_str(), &end);
        if (end != reply->retry_after.c_str() && s >= 0) st = st.WithRetryAfter(s);
      }
      return st;
    }
    if (http == 401 || http == 403) return Error(ErrorKind::kAuth, o_.label + ": " + said);
    if (http == 404 && code == "unknown_task")
      return Error(ErrorKind::kNotFound, o_.label + ": " + said);
    if (http >= 400 && http < 500) return Error(ErrorKind::kInvalidInput, o_.label + ": " + said);
    return Lost(o_.label, said);
  }

 private:
  RemotePortOptions o_;
  std::atomic<uint64_t> sequence_{0};
};

}  // namespace

std::unique_ptr<eval::EvalService> MakeRemoteEvalService(RemotePortOptions options) {
  return std::make_unique<RemoteEvalService>(std::move(options));
}

}  // namespace kforge::remote
