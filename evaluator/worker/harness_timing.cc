// The harness worker's clock: the calibration of the mailbox path, and
// driving the timed calls of a served group (the reference group, which
// times the baseline, or the candidate group) through the mailbox. Every
// time the coordinator believes is measured here; a served process's own
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

// Adds the microseconds of its scope to `*to` (DriveReply::Split).
class Tally {
 public:
  explicit Tally(double* to) : to_(to), t0_(Clock::now()) {}
  ~Tally() { *to_ += MicrosSince(t0_); }
  Tally(const Tally&) = delete;
  Tally& operator=(const Tally&) = delete;

 private:
  double* to_;
  Clock::time_point t0_;
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

// L2 lines a served process marked persisting (stream access-policy
// windows) go back to normal, and where this context may set the L2
// set-aside (not under MPS, whose daemon kforge starts with none), it is
// set to none: nothing a candidate configured outlives it into the
// baseline's drive. Refusals are expected and cleared.
void ResetPersistingL2() {
  (void)cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0);
  (void)cudaCtxResetPersistingL2Cache();
  (void)cudaGetLastError();
}

Clock::time_point DeadlineIn(double seconds) {
  return Clock::now() + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
}

}  // namespace

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

// Per round: once every rank's calls of the last round have answered, fresh
// inputs for the round's sets and the baseline's outputs for them (the
// expected values), both in the private arena. Then one candidate call per
// entry of the round's order: the call's set is staged (its inputs copied
// into the candidate's arena, its outputs poisoned, L2 flushed), all ranks
// post together, each rank's wall time runs from its post to the candidate's
// answer, and the call's outputs and inputs are verified right after, before
// the next call. No call's inputs exist where the candidate can read them
// before that call is staged, so work done ahead of a call (in an earlier
// call, or a host thread) can only be work on inputs that are already spent;
// and a set never repeats within a round, so nothing can be cached.
Result<json> HarnessWorker::Drive(const eval::Message& m) {
  if (!configured()) return Error(ErrorKind::kHarness, "drive before configure");
  ResetPersistingL2();
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
    // A kernel may read its peers' inputs until its own call returns, and a
    // peer's call can still be running when this rank's has answered: no
    // rank's inputs change before every rank is done with the last round.
    {
      Tally t(&reply.split.barrier_us);
      KF_RETURN_IF_ERROR(control_.Barrier());
    }
    {
      Tally t(&reply.split.round_us);
      KF_RETURN_IF_ERROR(MakeInputs(round.seeds, /*to_candidate=*/false));
      KF_RETURN_IF_ERROR(RunBaseline(sets));
    }
    for (int set : round.order) {
      // Clocks after the warm-up (an idle GPU's are low), and after the last call.
      if (call == req.warmup) ReadClocks(&reply.sm_clock_mhz, &reply.temperature_c);
      // Every rank's last call has answered before any rank stages the next:
      // staging (and the L2 flush above all) must not slow a peer's call.
      {
        Tally t(&reply.split.barrier_us);
        KF_RETURN_IF_ERROR(control_.Barrier());
      }
      {
        Tally t(&reply.split.stage_us);
        KF_RETURN_IF_ERROR(StageCall(set, round.poison));
      }
      {
        Tally t(&reply.split.barrier_us);
        KF_RETURN_IF_ERROR(control_.Barrier());
      }
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
      {
        Tally t(&reply.split.verify_us);
        KF_RETURN_IF_ERROR(
            VerifySet(set, call, round.poison, &reply.failures, &reply.inputs_changed));
      }
      ++seq;
      ++call;
    }
  }
  ReadClocks(&reply.sm_clock_mhz, &reply.temperature_c);
  // Every rank has finished verifying before the candidate is told anything else.
  KF_RETURN_IF_ERROR(control_.Barrier());
  return reply.ToJson();
}

}  // namespace kforge::worker
