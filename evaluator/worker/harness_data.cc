// The harness worker's data path: inputs (generated on the GPU, written to
// the private arena and copied to the candidate's), the baseline's expected
// outputs, poison, reading the candidate's outputs back and verifying them.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cuda_check.h"
#include "device_ops.h"
#include "harness.h"
#include "kforge/evaluator/dtype.h"
#include "task/compare.h"
#include "task/inputs.h"

namespace kforge::worker {

using nlohmann::json;
namespace proto = eval::proto;

namespace {

Status CheckSet(int set, int sets) {
  if (set < 0 || set >= sets) {
    return Error(ErrorKind::kHarness, "set " + std::to_string(set) + " out of range");
  }
  return Status::Ok();
}

json FiniteOrNull(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// Raw device bytes to the host.
Result<std::vector<char>> ToHost(const void* src, size_t bytes) {
  std::vector<char> out(bytes);
  if (bytes > 0) KF_CUDA(cudaMemcpy(out.data(), src, bytes, cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace

Result<json> HarnessWorker::Inputs(const eval::Message& m) {
  if (!configured()) return Error(ErrorKind::kHarness, "inputs before configure");
  KF_ASSIGN_OR_RETURN(proto::InputsRequest req, proto::InputsRequest::Parse(m.body));
  if (!req.custom.empty())
    return Error(ErrorKind::kHarness, "custom input bytes are not supported");
  KF_RETURN_IF_ERROR(MakeInputs(req.seeds, /*to_candidate=*/true));
  return json::object();
}

Status HarnessWorker::MakeInputs(const std::vector<proto::SetSeed>& seeds, bool to_candidate) {
  const eval::Problem& p = view_->problem;
  const proto::ArenaLayout& l = view_->layout;
  for (const proto::SetSeed& s : seeds) {
    KF_RETURN_IF_ERROR(CheckSet(s.set, sets_));
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      const eval::ConcreteTensor& t = p.inputs[i];
      const size_t bytes = t.NbytesOf(args_.rank);
      char* pristine = Private(l.pristine_off[s.set][i]);
      auto gen = eval::MakeInputGen(p, static_cast<int>(i), args_.rank, s.seed);
      if (gen.ok()) {
        KF_RETURN_IF_ERROR(
            LaunchGenerate(pristine, *gen, static_cast<uint64_t>(t.NumelOf(args_.rank)), stream_));
      } else {
        // Inputs with a task-registered generator are made on the host (the
        // same function the oracle's inputs come from).
        std::vector<char> host(bytes);
        KF_RETURN_IF_ERROR(
            eval::GenerateInput(p, static_cast<int>(i), args_.rank, s.seed, host.data()));
        KF_CUDA(cudaMemcpyAsync(pristine, host.data(), bytes, cudaMemcpyHostToDevice, stream_));
        KF_CUDA(cudaStreamSynchronize(stream_));
      }
      if (l.input_off[s.set][i] != l.pristine_off[s.set][i]) {
        KF_CUDA(cudaMemcpyAsync(Private(l.input_off[s.set][i]), pristine, bytes,
                                cudaMemcpyDeviceToDevice, stream_));
      }
    }
    if (to_candidate) KF_RETURN_IF_ERROR(CopyInputsToCandidate(s.set, /*inout=*/true));
  }
  KF_CUDA(cudaStreamSynchronize(stream_));
  return control_.Barrier();
}

Status HarnessWorker::CopyInputsToCandidate(int set, bool inout) {
  const eval::Problem& p = view_->problem;
  const proto::ArenaLayout& l = view_->layout;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    if (p.inputs[i].inout && !inout) continue;
    KF_CUDA(cudaMemcpyAsync(Candidate(candidate_layout_.input_off[set][i]),
                            Private(l.pristine_off[set][i]), p.inputs[i].NbytesOf(args_.rank),
                            cudaMemcpyDeviceToDevice, stream_));
  }
  return Status::Ok();
}

Status HarnessWorker::StageCall(int set, uint32_t poison) {
  KF_RETURN_IF_ERROR(CheckSet(set, sets_));
  // In-place inputs are restored by PoisonSets, from the same pristine copy.
  KF_RETURN_IF_ERROR(CopyInputsToCandidate(set, /*inout=*/false));
  KF_RETURN_IF_ERROR(PoisonSets({set}, poison));  // synchronises the stream
  if (flush_ != nullptr) {
    KF_RETURN_IF_ERROR(LaunchL2Flush(flush_, flush_bytes_, check_sink_, stream_));
    KF_CUDA(cudaStreamSynchronize(stream_));
  }
  return Status::Ok();
}

Status HarnessWorker::RestoreInout(bool candidate, int set) {
  const eval::Problem& p = view_->problem;
  const proto::ArenaLayout& l = view_->layout;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    if (!p.inputs[i].inout) continue;
    char* dst =
        candidate ? Candidate(candidate_layout_.input_off[set][i]) : Private(l.input_off[set][i]);
    KF_CUDA(cudaMemcpyAsync(dst, Private(l.pristine_off[set][i]), p.inputs[i].NbytesOf(args_.rank),
                            cudaMemcpyDeviceToDevice, stream_));
  }
  return Status::Ok();
}

Result<json> HarnessWorker::BaselineRun(const eval::Message& m) {
  if (!configured()) return Error(ErrorKind::kHarness, "baseline_run before configure");
  KF_ASSIGN_OR_RETURN(proto::SetsRequest req, proto::SetsRequest::Parse(m.body, sets_));
  KF_RETURN_IF_ERROR(RunBaseline(req.sets));
  return json::object();
}

Status HarnessWorker::RunBaseline(const std::vector<int>& sets) {
  for (int set : sets) {
    KF_RETURN_IF_ERROR(CheckSet(set, sets_));
    KF_RETURN_IF_ERROR(RestoreInout(false, set));
    KF_CUDA(cudaStreamSynchronize(stream_));
    KF_RETURN_IF_ERROR(control_.Barrier());
    int rc = baseline_.Run(BaselineContext(set));
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      return Error(ErrorKind::kRuntimeError,
                   std::string("the baseline's kf_run: CUDA error ") + cudaGetErrorName(err));
    }
    if (rc != 0) return Error(ErrorKind::kRuntimeError, NonZeroReturn("the baseline's kf_run", rc));
    KF_RETURN_IF_ERROR(control_.Barrier());
  }
  return Status::Ok();
}

Result<json> HarnessWorker::Poison(const eval::Message& m) {
  if (!configured()) return Error(ErrorKind::kHarness, "poison before configure");
  KF_ASSIGN_OR_RETURN(proto::SetsRequest req, proto::SetsRequest::Parse(m.body, sets_));
  KF_RETURN_IF_ERROR(PoisonSets(req.sets, req.poison));
  KF_RETURN_IF_ERROR(control_.Barrier());  // everyone poisoned before anyone runs
  return json::object();
}

Status HarnessWorker::PoisonSets(const std::vector<int>& sets, uint32_t pattern) {
  const eval::Problem& p = view_->problem;
  for (int set : sets) {
    KF_RETURN_IF_ERROR(CheckSet(set, sets_));
    for (size_t o = 0; o < p.outputs.size(); ++o) {
      if (p.outputs[o].inout_of >= 0) continue;  // restored below instead
      KF_RETURN_IF_ERROR(LaunchPoison(Candidate(candidate_layout_.output_off[set][o]),
                                      p.outputs[o].NbytesOf(args_.rank), pattern, stream_));
    }
    KF_RETURN_IF_ERROR(RestoreInout(true, set));
  }
  KF_CUDA(cudaStreamSynchronize(stream_));
  last_poison_ = pattern;
  return Status::Ok();
}

Result<json> HarnessWorker::ReadOutputs(const eval::Message& m, std::vector<int>* fds) {
  if (!configured()) return Error(ErrorKind::kHarness, "read_outputs before configure");
  KF_ASSIGN_OR_RETURN(proto::ReadOutputsRequest req,
                      proto::ReadOutputsRequest::Parse(m.body, sets_));
  const eval::Problem& p = view_->problem;
  proto::ReadOutputsReply reply;
  size_t total = 0;
  for (const auto& t : p.outputs) {
    reply.offsets.push_back(total);
    reply.nbytes.push_back(t.NbytesOf(args_.rank));
    total += (t.NbytesOf(args_.rank) + 63) / 64 * 64;
  }
  int fd = memfd_create("kforge-outputs", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(std::max<size_t>(total, 1))) != 0) {
    if (fd >= 0) close(fd);
    return Error(ErrorKind::kHarness, "memfd for outputs failed");
  }
  void* mem = mmap(nullptr, std::max<size_t>(total, 1), PROT_WRITE, MAP_SHARED, fd, 0);
  if (mem == MAP_FAILED) {
    close(fd);
    return Error(ErrorKind::kHarness, "mmap for outputs failed");
  }
  Status copied = Status::Ok();
  for (size_t o = 0; o < p.outputs.size() && copied.ok(); ++o) {
    const char* src = req.baseline ? Private(view_->layout.output_off[req.set][o])
                                   : Candidate(candidate_layout_.output_off[req.set][o]);
    cudaError_t e = cudaMemcpy(static_cast<char*>(mem) + reply.offsets[o], src, reply.nbytes[o],
                               cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
      copied =
          Error(ErrorKind::kRuntimeError, std::string("reading outputs: ") + cudaGetErrorName(e));
  }
  munmap(mem, std::max<size_t>(total, 1));
  if (!copied.ok()) {
    close(fd);
    return copied;
  }
  fds->push_back(fd);
  if (req.baseline) return reply.ToJson();  // the candidate's inputs are checked with its outputs
  std::vector<std::pair<int, std::string>> changed;
  KF_RETURN_IF_ERROR(VerifySet(req.set, req.set, last_poison_, nullptr, &changed));
  for (auto& [set, name] : changed) reply.inputs_changed.push_back(name);
  return reply.ToJson();
}

Result<json> HarnessWorker::Verify(const eval::Message& m) {
  if (!configured()) return Error(ErrorKind::kHarness, "verify before configure");
  KF_ASSIGN_OR_RETURN(proto::SetsRequest req, proto::SetsRequest::Parse(m.body, sets_));
  proto::VerifyReply reply;
  for (int set : req.sets) {
    KF_RETURN_IF_ERROR(CheckSet(set, sets_));
    KF_RETURN_IF_ERROR(VerifySet(set, set, last_poison_, &reply.failures, &reply.inputs_changed));
  }
  return reply.ToJson();
}

// Checks set `set`: every output against the baseline's (with the output's
// tolerance, on the device) when `failures` is given, and every input against
// its pristine copy (bit for bit). Findings are tagged `tag` (the set, or a
// timed call's index).
Status HarnessWorker::VerifySet(int set, int tag, uint32_t poison,
                                std::vector<proto::Failure>* failures,
                                std::vector<std::pair<int, std::string>>* changed) {
  const eval::Problem& p = view_->problem;
  const proto::ArenaLayout& l = view_->layout;
  const size_t n_out = failures != nullptr ? p.outputs.size() : 0;
  const size_t checks = n_out + p.inputs.size();
  if (checks > kMaxChecks) return Error(ErrorKind::kHarness, "too many tensors to verify");
  // A counted output is compared on the rows the baseline counted (compare.h);
  // the count itself is an output like any other. `part[o]` is what is compared.
  std::vector<eval::ConcreteTensor> part(n_out);
  for (size_t o = 0; o < n_out; ++o) {
    const eval::ConcreteTensor& t = p.outputs[o];
    const auto& shape = t.ShapeOf(args_.rank);
    if (t.count_output < 0 || (t.only_rank >= 0 && t.only_rank != args_.rank)) {
      part[o] = t.FirstRows(args_.rank, shape.empty() ? 0 : shape[0]);
      continue;
    }
    const eval::ConcreteTensor& c = p.outputs[static_cast<size_t>(t.count_output)];
    KF_CUDA(cudaStreamSynchronize(stream_));  // the baseline's count is on stream_
    KF_ASSIGN_OR_RETURN(std::vector<char> count,
                        ToHost(Private(l.output_off[set][static_cast<size_t>(t.count_output)]),
                               eval::DtypeSize(c.dtype)));
    KF_ASSIGN_OR_RETURN(
        int64_t rows,
        eval::CountedRows(t, args_.rank, eval::LoadAsDouble(count.data(), c.dtype, 0)));
    part[o] = t.FirstRows(args_.rank, rows);
  }
  DeviceCheck init[kMaxChecks];
  for (size_t k = 0; k < checks; ++k) init[k] = {0, ~0ull, 0, 0};
  KF_CUDA(
      cudaMemcpyAsync(check_, init, checks * sizeof(DeviceCheck), cudaMemcpyHostToDevice, stream_));
  for (size_t o = 0; o < n_out; ++o) {
    const eval::ConcreteTensor& t = p.outputs[o];
    if (t.only_rank >= 0 && t.only_rank != args_.rank) continue;
    KF_RETURN_IF_ERROR(LaunchCompare(Candidate(candidate_layout_.output_off[set][o]),
                                     Private(l.output_off[set][o]), static_cast<int>(t.dtype),
                                     static_cast<uint64_t>(part[o].numel), t.tolerance.atol,
                                     t.tolerance.rtol, check_ + o, stream_));
  }
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    if (p.inputs[i].inout) continue;  // its new state is an output
    KF_RETURN_IF_ERROR(LaunchBytesDiffer(
        Candidate(candidate_layout_.input_off[set][i]), Private(l.pristine_off[set][i]),
        p.inputs[i].NbytesOf(args_.rank), check_ + n_out + i, stream_));
  }
  DeviceCheck found[kMaxChecks];
  KF_CUDA(cudaMemcpyAsync(found, check_, checks * sizeof(DeviceCheck), cudaMemcpyDeviceToHost,
                          stream_));
  KF_CUDA(cudaStreamSynchronize(stream_));
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    if (found[n_out + i].bad != 0) changed->emplace_back(tag, p.inputs[i].name);
  }
  for (size_t o = 0; o < n_out; ++o) {
    const eval::ConcreteTensor& t = p.outputs[o];
    // Against the baseline, not the exact oracle (compare.h): its RMS bound
    // is the coordinator's, from the baseline's measured error.
    eval::Tolerance tol = eval::AgainstBaseline(t.tolerance);
    if (o < rms_vs_baseline_.size()) tol.rms = rms_vs_baseline_[o];
    const double rms_rel_err = eval::RmsRelErr(found[o].sq_diff, found[o].sq_expected);
    const bool rms_off = eval::RmsExceeded(tol, part[o].numel, rms_rel_err);
    if (found[o].bad == 0 && !rms_off) continue;
    if (failures->size() >= kMaxExplained) {
      failures->push_back({tag,
                           static_cast<int>(o),
                           {{"rank", args_.rank},
                            {"output", t.name},
                            {"passed", false},
                            {"bad_count", found[o].bad},
                            {"rms_rel_err", FiniteOrNull(rms_rel_err)}}});
      continue;
    }
    // The device says it failed; the host says how, for the model.
    eval::ConcreteTensor local = part[o];
    local.tolerance = tol;
    KF_ASSIGN_OR_RETURN(std::vector<char> got,
                        ToHost(Candidate(candidate_layout_.output_off[set][o]), local.nbytes));
    KF_ASSIGN_OR_RETURN(std::vector<char> want,
                        ToHost(Private(l.output_off[set][o]), local.nbytes));
    std::vector<double> expected(static_cast<size_t>(local.numel));
    for (size_t k = 0; k < expected.size(); ++k)
      expected[k] = eval::LoadAsDouble(want.data(), t.dtype, k);
    eval::CompareContext ctx;
    ctx.world = args_.world;
    ctx.rank = args_.rank;
    ctx.poison = poison;
    eval::CompareReport report = eval::CompareOutput(local, got.data(), expected, ctx);
    if (t.count_output >= 0 && !local.shape.empty()) report.counted_rows = local.shape[0];
    json j = eval::ToJson(report);
    if (report.passed) {
      // Device and host disagree only at the tolerance's edge (or in the
      // order of the RMS sums); the device's finding is the verdict.
      j["passed"] = false;
      j["bad_count"] = found[o].bad;
      j["rms_rel_err"] = FiniteOrNull(rms_rel_err);
    }
    failures->push_back({tag, static_cast<int>(o), std::move(j)});
  }
  return Status::Ok();
}

}  // namespace kforge::worker
