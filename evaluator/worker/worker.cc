#include "worker.h"

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "cuda_check.h"
#include "hex.h"

namespace kforge::worker {
namespace {

constexpr auto kForever = std::chrono::hours(24 * 365);

}  // namespace

Worker::Worker(const WorkerArgs& args) : args_(args), channel_(args.channel_fd) {}

Worker::~Worker() {
  for (auto& [name, slot] : slots_) {
    if (slot.set_up && slot.teardown) slot.teardown(&slot.ctx);
  }
  ReleaseMemory();
  backend_.reset();
}

int Worker::Run() {
  auto control = eval::ControlBlock::Attach(args_.control_fd);
  if (!control.ok()) {
    std::fprintf(stderr, "kforge-worker: %s\n", control.status().ToString().c_str());
    return 2;
  }
  control_ = std::move(control).value();
  if (Status s = Hello(); !s.ok()) {
    (void)channel_.Send({{"ok", false}, {"kind", "harness_error"}, {"error", s.message()}});
    return 3;
  }
  trace_ = std::getenv("KFORGE_WORKER_TRACE") != nullptr;
  while (true) {
    auto msg = channel_.Receive(kForever);
    if (!msg.ok()) {
      // The coordinator went away (or sent garbage): nothing left to serve.
      if (msg.status().kind() != ErrorKind::kIo ||
          msg.status().message() != "peer closed the channel") {
        std::fprintf(stderr, "kforge-worker rank %d: %s\n", args_.rank,
                     msg.status().ToString().c_str());
      }
      return 0;
    }
    std::string op = msg->body.value("op", "");
    if (trace_) std::fprintf(stderr, "kforge-worker rank %d: %s\n", args_.rank, op.c_str());
    if (op == "exit") {
      (void)channel_.Send({{"ok", true}});
      return 0;
    }
    std::vector<int> fds;
    Result<nlohmann::json> reply = [&]() -> Result<nlohmann::json> {
      try {
        if (op == "run") return HandleRun(msg->body, &fds);
        return Dispatch(*msg);
      } catch (const std::exception& e) {
        return Error(ErrorKind::kHarness, std::string("worker: ") + e.what());
      }
    }();
    nlohmann::json body;
    if (reply.ok()) {
      body = std::move(reply).value();
      body["ok"] = true;
    } else {
      body = {{"ok", false},
              {"kind", std::string(ErrorKindName(reply.status().kind()))},
              {"error", reply.status().message()},
              {"rank", args_.rank}};
    }
    Status sent = channel_.Send(body, fds);
    for (int fd : fds) close(fd);
    if (!sent.ok()) {
      std::fprintf(stderr, "kforge-worker rank %d: cannot reply: %s\n", args_.rank,
                   sent.message().c_str());
      return 4;
    }
    // A CUDA error inside a kernel leaves the context unusable: stop here so
    // the coordinator starts a fresh rank group.
    if (!reply.ok() && reply.status().kind() == ErrorKind::kRuntimeError &&
        cudaPeekAtLastError() != cudaSuccess) {
      std::fprintf(stderr, "kforge-worker rank %d: CUDA context unusable after: %s\n", args_.rank,
                   reply.status().message().c_str());
      return 5;
    }
  }
}

Status Worker::Hello() {
  KF_CUDA(cudaSetDevice(args_.device));
  KF_CUDA(cudaFree(nullptr));  // create the context now, not inside a timed call
  KF_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  KF_RETURN_IF_ERROR(QueryGpuInfo(args_.device, &gpu_));
  nlohmann::json hello = {{"op", "hello"},
                          {"rank", args_.rank},
                          {"pid", static_cast<int>(getpid())},
                          {"device", args_.device},
                          {"gpu_name", gpu_.name},
                          {"sm_count", gpu_.sm_count},
                          {"l2_bytes", gpu_.l2_bytes},
                          {"cc", std::to_string(gpu_.cc_major) + std::to_string(gpu_.cc_minor)}};
  if (!args_.emulated && args_.rank == 0) {
    KF_ASSIGN_OR_RETURN(std::string id, NcclUniqueId());
    hello["nccl_id"] = ToHex(id.data(), id.size());
  }
  return channel_.Send(hello);
}

Result<nlohmann::json> Worker::Dispatch(const eval::Message& msg) {
  const nlohmann::json& m = msg.body;
  std::string op = m.value("op", "");
  if (op == "nccl_init") return HandleNcclInit(m);
  if (op == "load") return HandleLoad(m);
  if (op == "unload") return HandleUnload(m);
  if (op == "alloc") return HandleAlloc(m);
  if (op == "peers") return HandlePeers(m);
  if (op == "free") return HandleFree();
  if (op == "setup") return HandleSetup(m);
  if (op == "teardown") return HandleTeardown(m);
  if (op == "inputs") return HandleInputs(m);
  if (op == "time") return HandleTime(m);
  if (op == "revalidate") return HandleRevalidate(m);
  return Error(ErrorKind::kHarness, "unknown op '" + op + "'");
}

Result<nlohmann::json> Worker::HandleNcclInit(const nlohmann::json& m) {
  std::string id(128, '\0');
  KF_RETURN_IF_ERROR(FromHex(m.at("id").get<std::string>(), id.data(), id.size()));
  KF_ASSIGN_OR_RETURN(backend_, MakeNcclBackend(args_.rank, args_.world, id));
  return nlohmann::json{{"backend", "nccl"}, {"nccl_version", NcclVersion()}};
}

Result<KernelSlot*> Worker::Slot(const nlohmann::json& m) {
  std::string name = m.value("slot", "");
  auto it = slots_.find(name);
  if (it == slots_.end())
    return Error(ErrorKind::kHarness, "no kernel loaded in slot '" + name + "'");
  return &it->second;
}

Result<nlohmann::json> Worker::HandleLoad(const nlohmann::json& m) {
  std::string name = m.at("slot");
  if (name != "baseline" && name != "candidate")
    return Error(ErrorKind::kHarness, "bad slot " + name);
  (void)HandleUnload(m);
  KernelSlot slot;
  slot.path = m.at("path");
  // RTLD_LOCAL: a kernel's symbols never leak into another kernel. RTLD_NOW:
  // an unresolved symbol is an error now, not a crash in the middle of a call.
  slot.handle = dlopen(slot.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!slot.handle) {
    const char* err = dlerror();
    return Error(ErrorKind::kRuntimeError,
                 std::string("loading the kernel failed: ") + (err ? err : "?"));
  }
  slot.setup = reinterpret_cast<KernelFn>(dlsym(slot.handle, "kf_setup"));
  slot.run = reinterpret_cast<KernelFn>(dlsym(slot.handle, "kf_run"));
  slot.teardown = reinterpret_cast<KernelFn>(dlsym(slot.handle, "kf_teardown"));
  if (!slot.run) {
    dlclose(slot.handle);
    return Error(ErrorKind::kRuntimeError, "the kernel does not export kf_run (extern \"C\")");
  }
  slots_[name] = slot;
  return nlohmann::json::object();
}

Result<nlohmann::json> Worker::HandleUnload(const nlohmann::json& m) {
  auto it = slots_.find(m.value("slot", ""));
  if (it == slots_.end()) return nlohmann::json::object();
  if (it->second.set_up && it->second.teardown) it->second.teardown(&it->second.ctx);
  dlclose(it->second.handle);
  slots_.erase(it);
  return nlohmann::json::object();
}

Result<nlohmann::json> Worker::HandleSetup(const nlohmann::json& m) {
  KF_ASSIGN_OR_RETURN(KernelSlot * slot, Slot(m));
  int index = SlotIndex(m.at("slot"));
  if (!base_) return Error(ErrorKind::kHarness, "setup before alloc");
  // The signal pad starts zeroed for every kf_setup, on every rank, before any
  // rank's kf_setup may signal a peer.
  KF_CUDA(cudaMemsetAsync(Local(layout_.pad_off[index]), 0, layout_.pad_bytes, stream_));
  KF_CUDA(cudaStreamSynchronize(stream_));
  KF_RETURN_IF_ERROR(control_.Barrier());
  slot->ctx = ContextFor(*slot, index, 0);
  slot->ctx.user = nullptr;
  if (slot->setup) {
    int rc = slot->setup(&slot->ctx);
    KF_CUDA(cudaDeviceSynchronize());
    if (rc != 0) return Error(ErrorKind::kRuntimeError, "kf_setup returned " + std::to_string(rc));
  }
  slot->set_up = true;
  KF_RETURN_IF_ERROR(control_.Barrier());
  return nlohmann::json::object();
}

Result<nlohmann::json> Worker::HandleTeardown(const nlohmann::json& m) {
  KF_ASSIGN_OR_RETURN(KernelSlot * slot, Slot(m));
  if (slot->set_up && slot->teardown) {
    KF_CUDA(cudaDeviceSynchronize());
    int rc = slot->teardown(&slot->ctx);
    KF_CUDA(cudaDeviceSynchronize());
    slot->set_up = false;
    if (rc != 0)
      return Error(ErrorKind::kRuntimeError, "kf_teardown returned " + std::to_string(rc));
  }
  slot->set_up = false;
  return nlohmann::json::object();
}

}  // namespace kforge::worker
