// The harness worker's clock: the baseline's timed calls (in this trusted
// process, with no candidate code alive anywhere), the calibration of the
// mailbox path, and driving the candidate's timed calls through the mailbox.
// Every time the coordinator believes is measured here; the candidate's own
// event times come back as claims to be checked against this clock.
#include <algorithm>
#include <chrono>
#include <set>

#include "cuda_check.h"
#include "device_ops.h"
#include "harness.h"
#include "nvml.h"

namespace kforge::worker {

using nlohmann::json;
namespace proto = eval::proto;
using Clock = std::chrono::steady_clock;

namespace {

double MicrosSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

class EventPair {
 public:
  Status Create() {
    KF_CUDA(cudaEventCreate(&start));
    KF_CUDA(cudaEventCreate(&stop));
    return Status::Ok();
  }
  ~EventPair() {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
  }
  cudaEvent_t start = nullptr, stop = nullptr;
};

// The SM clock and temperature of the current device, appended to `clock`
// and `temp` (nothing without NVML).
void ReadClocks(std::vector<double>* clock, std::vector<double>* temp) {
  int device = 0;
  char bus[32] = {0};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetPCIBusId(bus, sizeof(bus), device) != cudaSuccess)
    return;
  if (auto r = ReadNvml(bus)) {
    clock->push_back(r->sm_clock_mhz);
    temp->push_back(r->temperature_c);
  }
}

Clock::time_point DeadlineIn(double seconds) {
  return Clock::now() + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
}

}  // namespace

CollectiveBackend* HarnessWorker::Backend() const {
  return emulated_ ? emulated_.get() : nccl_.get();
}

Result<json> HarnessWorker::TimeBaseline(const eval::Message& m) {
  if (!configured() || !baseline_.set_up())
    return Error(ErrorKind::kHarness, "time_baseline before setup");
  KF_ASSIGN_OR_RETURN(proto::TimeBaselineRequest req,
                      proto::TimeBaselineRequest::Parse(m.body, sets_));
  EventPair ev;
  KF_RETURN_IF_ERROR(ev.Create());
  proto::CallTimes times;
  const size_t n = req.order.size();
  for (size_t k = 0; k < n + static_cast<size_t>(req.warmup); ++k) {
    const bool timed = k >= static_cast<size_t>(req.warmup);
    const int set = req.order[timed ? k - req.warmup : k % n];
    // Clocks after the warm-up (an idle GPU's are low), and after the last call.
    if (k == static_cast<size_t>(req.warmup)) ReadClocks(&times.sm_clock_mhz, &times.temperature_c);
    KF_RETURN_IF_ERROR(RestoreInout(false, set));
    KF_CUDA(cudaStreamSynchronize(stream_));
    KF_RETURN_IF_ERROR(control_.Barrier());
    if (CollectiveBackend* b = Backend()) KF_RETURN_IF_ERROR(b->Barrier(-1, stream_));
    KF_CUDA(cudaEventRecord(ev.start, stream_));
    auto t0 = Clock::now();
    int rc = baseline_.Run(BaselineContext(set));
    KF_CUDA(cudaEventRecord(ev.stop, stream_));
    cudaError_t err = cudaDeviceSynchronize();
    double wall = MicrosSince(t0);
    if (err != cudaSuccess) {
      return Error(
          ErrorKind::kRuntimeError,
          std::string("the baseline's kf_run (timing): CUDA error ") + cudaGetErrorName(err));
    }
    if (rc != 0) return Error(ErrorKind::kRuntimeError, NonZeroReturn("the baseline's kf_run", rc));
    if (!timed) continue;
    float ms = 0;
    KF_CUDA(cudaEventElapsedTime(&ms, ev.start, ev.stop));
    times.event_us.push_back(ms * 1000.0);
    times.wall_us.push_back(wall);
  }
  ReadClocks(&times.sm_clock_mhz, &times.temperature_c);
  return times.ToJson();
}

Result<proto::Mailbox> HarnessWorker::MailboxFrom(const eval::Message& m) {
  if (m.fds.size() != 1) return Error(ErrorKind::kHarness, "expected the mailbox descriptor");
  int fd = dup(m.fds[0]);  // the serve loop closes the request's descriptors
  if (fd < 0) return Error(ErrorKind::kHarness, "dup of the mailbox failed");
  return proto::Mailbox::Attach(fd);
}

// The candidate worker runs an empty kernel for every call, before any
// candidate code is loaded: wall - claim is then the trusted overhead of the
// mailbox path itself.
Result<json> HarnessWorker::Calibrate(const eval::Message& m) {
  KF_ASSIGN_OR_RETURN(proto::CalibrateRequest req, proto::CalibrateRequest::Parse(m.body));
  KF_ASSIGN_OR_RETURN(proto::Mailbox box, MailboxFrom(m));
  proto::CallTimes times;
  for (int k = 0; k < req.calls; ++k) {
    KF_RETURN_IF_ERROR(control_.Barrier());
    const uint64_t seq = req.first_seq + static_cast<uint64_t>(k);
    auto t0 = Clock::now();
    box.Post(seq, 0);
    KF_ASSIGN_OR_RETURN(auto answer, box.WaitAnswer(seq, DeadlineIn(req.call_deadline_s),
                                                    &control_.shared()->abort));
    times.wall_us.push_back(MicrosSince(t0));
    if (answer.malformed || answer.status != 0) {
      return Error(ErrorKind::kHarness, "the candidate worker answered calibration call " +
                                            std::to_string(seq) + " wrongly");
    }
    times.event_us.push_back(answer.claimed_us);
  }
  return times.ToJson();
}

// Per round: fresh inputs for the round's sets, the baseline's outputs for
// them (the expected values), every output poisoned; then one candidate call
// per entry of the round's order: all ranks post together, each rank's wall
// time runs from its post to the candidate's answer, and the call's outputs
// and inputs are verified right after, before the next call (which never
// reuses a set within a round, so nothing can be cached).
Result<json> HarnessWorker::Drive(const eval::Message& m) {
  if (!configured()) return Error(ErrorKind::kHarness, "drive before configure");
  KF_ASSIGN_OR_RETURN(proto::DriveRequest req, proto::DriveRequest::Parse(m.body, sets_));
  KF_ASSIGN_OR_RETURN(proto::Mailbox box, MailboxFrom(m));
  proto::DriveReply reply;
  uint64_t seq = req.first_seq;
  int call = 0;
  for (const auto& round : req.rounds) {
    std::set<int> seen(round.order.begin(), round.order.end());
    if (seen.size() != round.order.size())
      return Error(ErrorKind::kHarness, "drive: a set twice in one round");
    std::vector<int> sets;
    for (const auto& s : round.seeds) sets.push_back(s.set);
    for (int set : round.order) {
      if (std::find(sets.begin(), sets.end(), set) == sets.end()) {
        return Error(ErrorKind::kHarness, "drive: a call on a set without fresh inputs");
      }
    }
    KF_RETURN_IF_ERROR(MakeInputs(round.seeds));
    KF_RETURN_IF_ERROR(RunBaseline(sets));
    KF_RETURN_IF_ERROR(PoisonSets(round.order, round.poison));
    for (int set : round.order) {
      KF_RETURN_IF_ERROR(control_.Barrier());
      auto t0 = Clock::now();
      box.Post(seq, static_cast<uint32_t>(set));
      KF_ASSIGN_OR_RETURN(auto answer, box.WaitAnswer(seq, DeadlineIn(req.call_deadline_s),
                                                      &control_.shared()->abort));
      const double wall = MicrosSince(t0);
      if (answer.malformed) {
        reply.anomalies.push_back("call " + std::to_string(call) +
                                  ": the mailbox held an answer to call " +
                                  std::to_string(answer.seq) + " or a malformed time");
      } else if (answer.status != 0) {
        reply.anomalies.push_back("call " + std::to_string(call) + ": kf_run failed (" +
                                  std::to_string(answer.status) + ")");
      }
      if (call >= req.warmup) {
        reply.wall_us.push_back(wall);
        reply.claimed_us.push_back(answer.claimed_us);
      }
      KF_RETURN_IF_ERROR(
          VerifySet(set, call, round.poison, &reply.failures, &reply.inputs_changed));
      ++seq;
      ++call;
    }
  }
  // Every rank has finished verifying before the candidate is told anything else.
  KF_RETURN_IF_ERROR(control_.Barrier());
  return reply.ToJson();
}

}  // namespace kforge::worker
