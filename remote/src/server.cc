#include "kforge/remote/server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <thread>

#include "job_queue.h"
#include "kforge/core/log.h"
#include "kforge/core/mutex.h"
#include "kforge/remote/rendezvous.h"
#include "wire.h"

namespace kforge::remote {
namespace {

using nlohmann::json;

constexpr const char* kLog = "eval-server";

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

// A kernel name becomes a file name on this machine: a plain name only.
bool PlainFileName(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

void Refuse(httplib::Response& res, int status, std::string_view code, std::string_view message) {
  res.status = status;
  res.set_content(wire::ErrorBody(code, message), "application/json");
}

std::string SlurmJob() {
  const char* array_job = std::getenv("SLURM_ARRAY_JOB_ID");
  const char* array_task = std::getenv("SLURM_ARRAY_TASK_ID");
  if (array_job && array_task) return fmt::format("{}_{}", array_job, array_task);
  const char* job = std::getenv("SLURM_JOB_ID");
  return job ? job : "";
}

// The bearer token of a request, or empty.
std::string BearerToken(const httplib::Request& req) {
  const std::string h = req.get_header_value("Authorization");
  constexpr std::string_view kPrefix = "Bearer ";
  if (h.size() <= kPrefix.size() || h.compare(0, kPrefix.size(), kPrefix) != 0) return "";
  return h.substr(kPrefix.size());
}

int HttpStatusFor(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidInput:
      return 422;
    case ErrorKind::kNotFound:
      return 404;
    default:
      return 500;
  }
}

}  // namespace

struct EvalServer::Impl {
  EvalServerOptions options;
  TokenSet tokens;
  std::unique_ptr<JobQueue> queue;
  httplib::Server http;
  int port = 0;
  std::string url, host;

  Mutex mu;
  CondVar cv;
  bool drain_requested GUARDED_BY(mu) = false;
  int handlers GUARDED_BY(mu) = 0;  // /v1/evaluate requests being handled
  std::atomic<uint64_t> next_job{1};

  // The token's index, or -1 with the 401 already written.
  int Authorize(const httplib::Request& req, httplib::Response& res) {
    const std::string presented = BearerToken(req);
    if (presented.empty()) {
      res.set_header("WWW-Authenticate", "Bearer");
      Refuse(res, 401, "unauthorized",
             "this server needs a token: send `Authorization: Bearer TOKEN` (the client's "
             "--eval-token-file or $KFORGE_EVAL_TOKEN)");
      return -1;
    }
    const int index = tokens.Match(presented);
    if (index < 0) {
      LogWarn(kLog, "refused a request from {} with an unknown token", req.remote_addr);
      res.set_header("WWW-Authenticate", "Bearer error=\"invalid_token\"");
      Refuse(res, 401, "unauthorized", "the token is not one this server accepts");
      return -1;
    }
    return index;
  }

  json Info() const {
    QueueStats s = queue->Stats();
    json sets = json::array();
    for (size_t i = 0; i < options.gpu_sets.size(); ++i)
      sets.push_back({{"slot", i}, {"gpus", options.gpu_sets[i]}});
    json info = {{"schema", wire::kInfoSchema},
                 {"kforge_version", kforge::Version()},
                 {"kforge_commit", kforge::GitCommit()},
                 {"task_suite_hash", options.task_suite_hash},
                 {"host", host},
                 {"pid", static_cast<int>(getpid())},
                 {"url", url},
                 {"world", options.world},
                 {"gpu_sets", sets},
                 {"compile_slots", s.compile_slots},
                 {"capacity", {{"gpu", s.gpu_slots}, {"compile", s.compile_slots}}},
                 {"queue",
                  {{"gpu_waiting", s.gpu_waiting},
                   {"compile_waiting", s.compile_waiting},
                   {"gpu_running", s.gpu_running},
                   {"compile_running", s.compile_running},
                   {"max", options.max_queue},
                   {"answered", s.answered}}},
                 {"limits",
                  {{"max_upload_bytes", options.max_upload_bytes},
                   {"per_token", options.per_token},
                   {"max_queue", options.max_queue}}},
                 {"hardware", options.hardware},
                 {"draining", s.draining}};
    if (std::string job = SlurmJob(); !job.empty()) info["slurm_job"] = job;
    // What the launcher gave this server (Slurm's gres binding, say).
    if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES")) info["cuda_visible_devices"] = cvd;
    return info;
  }

  void Evaluate(const httplib::Request& req, httplib::Response& res) {
    {
      MutexLock lock(&mu);
      ++handlers;
    }
    struct Leave {
      Impl* self;
      ~Leave() {
        MutexLock lock(&self->mu);
        --self->handlers;
        self->cv.NotifyAll();
      }
    } leave{this};
    const int token = Authorize(req, res);
    if (token < 0) return;
    auto parsed = wire::ParseJobRequest(req.body);
    if (!parsed.ok()) return Refuse(res, 400, "bad_request", parsed.status().message());
    const wire::JobRequest& r = *parsed;
    if (r.task_suite_hash != options.task_suite_hash) {
      return Refuse(res, 409, "task_suite_mismatch",
                    fmt::format("this server's task suite ({}) is {}; the client's is {}. Give "
                                "both the same tasks folder.",
                                options.tasks_dir, options.task_suite_hash, r.task_suite_hash));
    }
    if (!r.kforge_version.empty() && r.kforge_version != kforge::Version()) {
      return Refuse(res, 409, "version_mismatch",
                    fmt::format("this server is kforge {}; the client is {}", kforge::Version(),
                                r.kforge_version));
    }
    if (!options.task_keys.count(r.job.task))
      return Refuse(res, 404, "unknown_task",
                    fmt::format("no task '{}' in this server's suite", r.job.task));
    if (!PlainFileName(r.job.kernel_name))
      return Refuse(res, 400, "bad_request",
                    "job field 'kernel_name': a plain file name ([A-Za-z0-9._-], at most 128)");
    if (!r.job.compile_only && r.job.world != 0 && r.job.world != options.world) {
      return Refuse(res, 422, "unsupported_world",
                    fmt::format("this server's GPU sets are for W={}; the job asks W={} (start "
                                "the server with --world {})",
                                options.world, r.job.world, r.job.world));
    }
    std::future<Result<json>> answer;
    switch (queue->Submit(r.job, token, &answer)) {
      case Admission::kAdmitted:
        break;
      case Admission::kQueueFull: {
        const int after = queue->RetryAfterSeconds(r.job.compile_only);
        res.set_header("Retry-After", std::to_string(after));
        return Refuse(res, 429, "queue_full",
                      fmt::format("the queue is full ({} jobs waiting); retry in about {} s",
                                  options.max_queue, after));
      }
      case Admission::kTokenLimit: {
        const int after = queue->RetryAfterSeconds(r.job.compile_only);
        res.set_header("Retry-After", std::to_string(after));
        return Refuse(res, 429, "token_limit",
                      fmt::format("this token already has {} jobs queued or running (the "
                                  "server's --per-token limit)",
                                  options.per_token));
      }
      case Admission::kDraining:
        res.set_header("Retry-After", "30");
        return Refuse(res, 503, "draining",
                      "the server is shutting down and takes no new jobs; run it elsewhere");
      case Admission::kNoSlot:
        return Refuse(res, 422, "no_slot",
                      r.job.compile_only
                          ? "this server has no compile slots"
                          : "this server has no GPU slots (started without GPUs): it can only "
                            "compile");
    }
    const uint64_t n = next_job++;
    LogInfo(kLog, "job {} ({}) from token {}: {} {}{}", n, r.id.empty() ? "-" : r.id,
            tokens.line(token), r.job.task, r.job.kernel_name,
            r.job.compile_only ? " (compile only)" : "");
    Result<json> doc = answer.get();
    if (!doc.ok()) {
      LogWarn(kLog, "job {}: the evaluator failed: {}", n, doc.status().ToString());
      json body = json::parse(wire::ErrorBody("evaluator_error", doc.status().message()));
      body["error"]["kind"] = std::string(ErrorKindName(doc.status().kind()));
      res.status = HttpStatusFor(doc.status().kind());
      res.set_content(body.dump(), "application/json");
      return;
    }
    (*doc)["evaluated_by"]["host"] = host;
    LogInfo(kLog, "job {}: {} in {:.1f} s", n, doc->value("status", "?"),
            doc->value("seconds", 0.0));
    res.set_content(doc->dump(), "application/json");
  }

  void Routes() {
    // Every endpoint, in one place.
    http.Get("/v1/healthz", [this](const httplib::Request&, httplib::Response& res) {
      if (queue->draining()) {
        res.status = 503;
        res.set_content(R"({"status":"draining"})", "application/json");
      } else {
        res.set_content(R"({"status":"ok"})", "application/json");
      }
    });
    http.Get("/v1/info", [this](const httplib::Request& req, httplib::Response& res) {
      if (Authorize(req, res) < 0) return;
      res.set_content(Info().dump(), "application/json");
    });
    http.Post("/v1/evaluate",
              [this](const httplib::Request& req, httplib::Response& res) { Evaluate(req, res); });
    // A request without a token is refused before its body is read.
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.path == "/v1/healthz") return httplib::Server::HandlerResponse::Unhandled;
      return Authorize(req, res) < 0 ? httplib::Server::HandlerResponse::Handled
                                     : httplib::Server::HandlerResponse::Unhandled;
    });
    http.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request&, httplib::Response& res) {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          if (res.status == 413) {
            Refuse(res, 413, "too_large",
                   fmt::format("the request body is over this server's upload limit of {} bytes "
                               "(--max-upload)",
                               options.max_upload_bytes));
          } else if (res.status == 404) {
            Refuse(res, 404, "not_found",
                   "no such endpoint (GET /v1/healthz, GET /v1/info, POST "
                   "/v1/evaluate)");
          } else {
            Refuse(res, res.status, "http_error", fmt::format("HTTP {}", res.status));
          }
          return httplib::Server::HandlerResponse::Handled;
        }));
    http.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "unknown";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          Refuse(res, 500, "internal", "internal error: " + what);
        });
  }
};

EvalServer::EvalServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

EvalServer::~EvalServer() {
  RequestDrain();
  impl_->http.stop();
}

Result<std::unique_ptr<EvalServer>> EvalServer::Start(const EvalServerOptions& options,
                                                      TokenSet tokens, EvaluatorFactory factory) {
  if (options.port < 0 || options.port > 65535)
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("port {}: expected 0..65535 (0: any free port)", options.port));
  if (options.gpu_sets.empty() && options.compile_slots <= 0)
    return Error(ErrorKind::kInvalidInput, "the server has neither GPU sets nor compile slots");
  if (tokens.size() == 0) return Error(ErrorKind::kInvalidInput, "the server has no tokens");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->tokens = std::move(tokens);
  std::vector<std::unique_ptr<eval::EvalService>> gpu, compile;
  for (const auto& set : options.gpu_sets) gpu.push_back(factory(set));
  for (int i = 0; i < options.compile_slots; ++i) compile.push_back(factory({}));
  impl->queue = std::make_unique<JobQueue>(
      JobQueueOptions{options.max_queue, options.per_token, options.gpu_cpus, options.compile_cpus},
      std::move(gpu), std::move(compile));
  Impl* self = impl.get();
  self->Routes();
  self->http.set_payload_max_length(options.max_upload_bytes);
  // Every admitted job holds a thread while it waits for its slot; the rest
  // answer refusals, health and info at once.
  const size_t threads =
      options.gpu_sets.size() + static_cast<size_t>(options.compile_slots) + options.max_queue + 8;
  self->http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // Address reuse only: SO_REUSEPORT (httplib's default) would let a second
  // server share the port and split the requests.
  self->http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof(yes));
  });
  if (options.port == 0) {
    self->port = self->http.bind_to_any_port(options.host);
    if (self->port <= 0) return Error(ErrorKind::kIo, "cannot bind " + options.host);
  } else {
    if (!self->http.bind_to_port(options.host, options.port)) {
      return Error(ErrorKind::kIo,
                   fmt::format("cannot bind {}:{} (in use, or not an address of this machine)",
                               options.host, options.port));
    }
    self->port = options.port;
  }
  self->host = Hostname();
  std::string advertised = options.advertise_host;
  if (advertised.empty()) {
    const bool any = options.host.empty() || options.host == "0.0.0.0" || options.host == "::";
    advertised = any ? self->host : options.host;
  }
  const bool v6 = advertised.find(':') != std::string::npos;
  self->url = fmt::format("http://{}{}{}:{}", v6 ? "[" : "", advertised, v6 ? "]" : "", self->port);
  return std::unique_ptr<EvalServer>(new EvalServer(std::move(impl)));
}

int EvalServer::port() const { return impl_->port; }
std::string EvalServer::url() const { return impl_->url; }

Status EvalServer::Run() {
  Impl& s = *impl_;
  // The socket listens from Bind on: a client that reads the file and
  // connects at once waits in the backlog until the accept loop below starts.
  Status registered = Status::Ok();
  if (!s.options.register_file.empty()) {
    Registration r;
    r.url = s.url;
    r.host = s.host;
    r.pid = static_cast<int>(getpid());
    r.gpu_slots = static_cast<int>(s.options.gpu_sets.size());
    r.compile_slots = s.options.compile_slots;
    r.slurm_job = SlurmJob();
    r.registered_at =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    registered = WriteRegistration(s.options.register_file, r);
    if (!registered.ok()) RequestDrain();
  }
  std::atomic<bool> listening_ended{false};
  std::thread listener([&s, &listening_ended] {
    s.http.listen_after_bind();
    listening_ended = true;
  });
  {
    MutexLock lock(&s.mu);
    s.cv.Wait(lock, [&s]() REQUIRES(s.mu) { return s.drain_requested; });
  }
  const QueueStats at_drain = s.queue->Stats();
  LogInfo(kLog, "draining: no new jobs; finishing the {} running and {} queued",
          at_drain.gpu_running + at_drain.compile_running,
          at_drain.gpu_waiting + at_drain.compile_waiting);
  if (!s.options.register_file.empty()) {
    std::error_code ec;
    std::filesystem::remove(s.options.register_file, ec);
  }
  s.queue->Drain();
  {
    // Every admitted job's answer is handed to its connection before the
    // server stops: stop() then lets the threads finish writing them.
    MutexLock lock(&s.mu);
    s.cv.Wait(lock, [&s]() REQUIRES(s.mu) { return s.handlers == 0; });
  }
  // httplib's stop() does nothing before the accept loop has started (and
  // the loop would then run forever): wait for it to start, briefly.
  while (!s.http.is_running() && !listening_ended)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  s.http.stop();
  listener.join();
  LogInfo(kLog, "drained: {} job(s) answered", s.queue->Stats().answered);
  if (!registered.ok()) return registered.WithContext("--register");
  return Status::Ok();
}

void EvalServer::RequestDrain() {
  MutexLock lock(&impl_->mu);
  impl_->drain_requested = true;
  impl_->cv.NotifyAll();
}

}  // namespace kforge::remote
