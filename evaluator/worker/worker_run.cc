// Correctness runs and the timing loop inside one rank.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "cuda_check.h"
#include "kforge/evaluator/dtype.h"
#include "task/compare.h"
#include "task/inputs.h"
#include "worker.h"

namespace kforge::worker {
namespace {

using Clock = std::chrono::steady_clock;

double MicrosSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Owns two CUDA events.
class EventPair {
 public:
  EventPair() {
    cudaEventCreate(&start_);
    cudaEventCreate(&stop_);
  }
  ~EventPair() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// Compares an output with the baseline's bytes of the same output; null when
// it passes.
nlohmann::json CompareWithBaseline(const eval::ConcreteTensor& t, const void* got, const void* ref,
                                   int rank, int world) {
  std::vector<double> expected(static_cast<size_t>(t.numel));
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = eval::LoadAsDouble(ref, t.dtype, i);
  eval::CompareContext ctx;
  ctx.world = world;
  ctx.rank = rank;
  eval::CompareReport report = eval::CompareOutput(t, got, expected, ctx);
  if (report.passed) return nullptr;
  return eval::ToJson(report);
}

}  // namespace

Result<nlohmann::json> Worker::HandleInputs(const nlohmann::json& m) {
  if (!base_) return Error(ErrorKind::kHarness, "inputs before alloc");
  uint64_t seed = m.at("seed");
  host_inputs_.assign(problem_->inputs.size(), {});
  reference_.clear();
  for (size_t i = 0; i < problem_->inputs.size(); ++i) {
    auto& host = host_inputs_[i];
    host.resize(problem_->inputs[i].nbytes);
    KF_RETURN_IF_ERROR(
        eval::GenerateInput(*problem_, static_cast<int>(i), args_.rank, seed, host.data()));
    KF_CUDA(cudaMemcpy(Local(layout_.input_off[0][i]), host.data(), host.size(),
                       cudaMemcpyHostToDevice));
    for (int s = 1; s < layout_.sets; ++s) {
      KF_CUDA(cudaMemcpy(Local(layout_.input_off[s][i]), Local(layout_.input_off[0][i]),
                         host.size(), cudaMemcpyDeviceToDevice));
    }
  }
  KF_RETURN_IF_ERROR(control_.Barrier());
  return nlohmann::json::object();
}

Status Worker::PoisonOutputs(int set) {
  for (size_t o = 0; o < problem_->outputs.size(); ++o) {
    KF_CUDA(cudaMemsetAsync(Local(layout_.output_off[set][o]), 0xFF, problem_->outputs[o].nbytes,
                            stream_));
  }
  KF_CUDA(cudaStreamSynchronize(stream_));
  return Status::Ok();
}

Status Worker::CallRun(KernelSlot& slot, int slot_index, int set, const char* phase) {
  kf_ctx ctx = ContextFor(slot, slot_index, set);
  int rc = slot.run(&ctx);
  slot.ctx.user = ctx.user;
  // Work a kernel left on another stream shows up here, not in ctx->stream.
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    return Error(ErrorKind::kRuntimeError, std::string("kf_run (") + phase + "): CUDA error " +
                                               cudaGetErrorName(err) + ": " +
                                               cudaGetErrorString(err));
  }
  if (rc != 0) {
    return Error(ErrorKind::kRuntimeError,
                 std::string("kf_run (") + phase + ") returned " + std::to_string(rc));
  }
  return Status::Ok();
}

Status Worker::CheckInputsUnchanged(int set, std::vector<std::string>* changed) {
  std::vector<char> buf;
  for (size_t i = 0; i < problem_->inputs.size(); ++i) {
    buf.resize(host_inputs_[i].size());
    KF_CUDA(cudaMemcpy(buf.data(), Local(layout_.input_off[set][i]), buf.size(),
                       cudaMemcpyDeviceToHost));
    if (std::memcmp(buf.data(), host_inputs_[i].data(), buf.size()) != 0) {
      changed->push_back(problem_->inputs[i].name);
    }
  }
  return Status::Ok();
}

Result<std::vector<std::vector<char>>> Worker::CopyOutputs(int set) {
  std::vector<std::vector<char>> out(problem_->outputs.size());
  for (size_t o = 0; o < out.size(); ++o) {
    out[o].resize(problem_->outputs[o].nbytes);
    KF_CUDA(cudaMemcpy(out[o].data(), Local(layout_.output_off[set][o]), out[o].size(),
                       cudaMemcpyDeviceToHost));
  }
  return out;
}

Result<nlohmann::json> Worker::CompareWithReference(const std::vector<std::vector<char>>& got) {
  if (reference_.size() != got.size())
    return Error(ErrorKind::kHarness, "no reference outputs kept");
  nlohmann::json mismatches = nlohmann::json::array();
  for (size_t o = 0; o < got.size(); ++o) {
    const eval::ConcreteTensor& t = problem_->outputs[o];
    if (t.only_rank >= 0 && t.only_rank != args_.rank) continue;
    nlohmann::json report =
        CompareWithBaseline(t, got[o].data(), reference_[o].data(), args_.rank, args_.world);
    if (!report.is_null()) mismatches.push_back(std::move(report));
  }
  return nlohmann::json{{"mismatches", mismatches}};
}

Result<nlohmann::json> Worker::HandleRun(const nlohmann::json& m, std::vector<int>* fds) {
  KF_ASSIGN_OR_RETURN(KernelSlot * slot, Slot(m));
  int index = SlotIndex(m.at("slot"));
  int set = m.value("set", 0);
  std::string mode = m.value("mode", "none");
  KF_RETURN_IF_ERROR(PoisonOutputs(set));
  // Everyone has poisoned before anyone runs (a kernel may write into peers).
  KF_RETURN_IF_ERROR(control_.Barrier());
  KF_RETURN_IF_ERROR(CallRun(*slot, index, set, "correctness"));
  // Everyone has finished writing before anyone reads its outputs.
  KF_RETURN_IF_ERROR(control_.Barrier());

  nlohmann::json reply = nlohmann::json::object();
  std::vector<std::string> changed;
  KF_RETURN_IF_ERROR(CheckInputsUnchanged(set, &changed));
  reply["inputs_changed"] = changed;
  KF_ASSIGN_OR_RETURN(auto outputs, CopyOutputs(set));
  if (mode == "memfd") {
    size_t total = 0;
    nlohmann::json layout = nlohmann::json::array();
    for (size_t o = 0; o < outputs.size(); ++o) {
      layout.push_back(
          {{"name", problem_->outputs[o].name}, {"offset", total}, {"nbytes", outputs[o].size()}});
      total += outputs[o].size();
    }
    int fd = memfd_create("kforge-outputs", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(std::max<size_t>(total, 1))) != 0) {
      if (fd >= 0) close(fd);
      return Error(ErrorKind::kHarness, "memfd for outputs failed");
    }
    void* p = mmap(nullptr, std::max<size_t>(total, 1), PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      close(fd);
      return Error(ErrorKind::kHarness, "mmap for outputs failed");
    }
    for (size_t o = 0; o < outputs.size(); ++o) {
      std::memcpy(static_cast<char*>(p) + layout[o]["offset"].get<size_t>(), outputs[o].data(),
                  outputs[o].size());
    }
    munmap(p, std::max<size_t>(total, 1));
    fds->push_back(fd);
    reply["layout"] = layout;
  } else if (mode == "keep_ref") {
    reference_ = std::move(outputs);
  } else if (mode == "compare_ref") {
    KF_ASSIGN_OR_RETURN(nlohmann::json cmp, CompareWithReference(outputs));
    reply["mismatches"] = cmp["mismatches"];
  }
  return reply;
}

Result<nlohmann::json> Worker::HandleTime(const nlohmann::json& m) {
  std::vector<std::string> names = m.at("slots");
  int warmup = m.value("warmup_iters", 10);
  int iters = m.value("iters", 100);
  int block = std::max(1, m.value("block", 10));
  bool poison_final = m.value("poison_final_block", false);
  std::vector<KernelSlot*> slots;
  for (const auto& n : names) {
    KF_ASSIGN_OR_RETURN(KernelSlot * s, Slot(nlohmann::json{{"slot", n}}));
    slots.push_back(s);
  }
  std::vector<int> counter(slots.size(), 0);
  std::vector<std::vector<double>> event_us(slots.size()), host_us(slots.size());
  std::vector<std::vector<int>> last_sets(slots.size());
  EventPair ev;

  auto iteration = [&](size_t k, bool record) -> Status {
    int set = counter[k]++ % layout_.sets;
    KF_CUDA(cudaStreamSynchronize(stream_));
    KF_RETURN_IF_ERROR(control_.Barrier());
    KF_RETURN_IF_ERROR(backend_->DeviceBarrier(stream_));
    KF_CUDA(cudaEventRecord(ev.start_, stream_));
    auto t0 = Clock::now();
    kf_ctx ctx = ContextFor(*slots[k], SlotIndex(names[k]), set);
    int rc = slots[k]->run(&ctx);
    slots[k]->ctx.user = ctx.user;
    KF_CUDA(cudaEventRecord(ev.stop_, stream_));
    cudaError_t err = cudaDeviceSynchronize();
    double host = MicrosSince(t0);
    if (err != cudaSuccess) {
      return Error(ErrorKind::kRuntimeError, std::string("kf_run (timing): CUDA error ") +
                                                 cudaGetErrorName(err) + ": " +
                                                 cudaGetErrorString(err));
    }
    if (rc != 0)
      return Error(ErrorKind::kRuntimeError, "kf_run (timing) returned " + std::to_string(rc));
    if (record) {
      float ms = 0;
      KF_CUDA(cudaEventElapsedTime(&ms, ev.start_, ev.stop_));
      event_us[k].push_back(ms * 1000.0);
      host_us[k].push_back(host);
      last_sets[k].push_back(set);
    }
    return Status::Ok();
  };

  for (int w = 0; w < warmup; ++w) {
    for (size_t k = 0; k < slots.size(); ++k) KF_RETURN_IF_ERROR(iteration(k, false));
  }
  // Interleave: blocks of `block` iterations per kernel, alternating, so that
  // clock and thermal drift hit baseline and candidate alike.
  for (int done = 0; done < iters; done += block) {
    int n = std::min(block, iters - done);
    bool final_round = done + n >= iters;
    for (size_t k = 0; k < slots.size(); ++k) {
      if (final_round) {
        last_sets[k].clear();
        if (poison_final) {
          // Outputs the final block will write start poisoned, so that the
          // revalidation afterwards sees only what this kernel wrote.
          for (int j = 0; j < n; ++j)
            KF_RETURN_IF_ERROR(PoisonOutputs((counter[k] + j) % layout_.sets));
          KF_RETURN_IF_ERROR(control_.Barrier());
        }
      }
      for (int j = 0; j < n; ++j) KF_RETURN_IF_ERROR(iteration(k, true));
    }
  }
  nlohmann::json reply = nlohmann::json::object();
  for (size_t k = 0; k < slots.size(); ++k) {
    std::vector<int> finals(last_sets[k].end() - std::min<size_t>(last_sets[k].size(), block),
                            last_sets[k].end());
    reply["results"][names[k]] = {
        {"event_us", event_us[k]}, {"host_us", host_us[k]}, {"final_sets", finals}};
  }
  return reply;
}

Result<nlohmann::json> Worker::HandleRevalidate(const nlohmann::json& m) {
  std::vector<int> sets = m.at("sets");
  nlohmann::json mismatches = nlohmann::json::array();
  std::vector<std::string> changed;
  std::sort(sets.begin(), sets.end());
  sets.erase(std::unique(sets.begin(), sets.end()), sets.end());
  for (int set : sets) {
    if (set < 0 || set >= layout_.sets) return Error(ErrorKind::kHarness, "bad set");
    KF_RETURN_IF_ERROR(CheckInputsUnchanged(set, &changed));
    KF_ASSIGN_OR_RETURN(auto outputs, CopyOutputs(set));
    KF_ASSIGN_OR_RETURN(nlohmann::json cmp, CompareWithReference(outputs));
    for (auto& mm : cmp["mismatches"]) {
      mm["set"] = set;
      mismatches.push_back(mm);
    }
  }
  return nlohmann::json{{"mismatches", mismatches}, {"inputs_changed", changed}};
}

}  // namespace kforge::worker
