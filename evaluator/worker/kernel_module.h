// One loaded kernel (.so): its entry points and the state kf_setup left.
#pragma once

#include <string>

#include "kforge/core/status.h"
#include "kforge/kernel.h"

namespace kforge::worker {

using KernelFn = int (*)(kf_ctx*);

class KernelModule {
 public:
  KernelModule() = default;
  ~KernelModule();
  KernelModule(const KernelModule&) = delete;
  KernelModule& operator=(const KernelModule&) = delete;

  // dlopen(RTLD_NOW | RTLD_LOCAL): an unresolved symbol is an error now, and a
  // kernel's symbols never leak into another's. kRuntimeError on failure.
  Status Load(const std::string& path);
  void Unload();  // tears down first if set up
  bool loaded() const { return handle_ != nullptr; }

  // kf_setup with `ctx` (zero-filled user state); remembers ctx->user.
  Status Setup(kf_ctx ctx);
  // kf_run on `ctx` (the set's view), carrying ctx->user over; returns kf_run's code.
  int Run(kf_ctx ctx);
  Status Teardown();
  bool set_up() const { return set_up_; }

 private:
  void* handle_ = nullptr;
  KernelFn setup_ = nullptr, run_ = nullptr, teardown_ = nullptr;
  kf_ctx ctx_{};
  bool set_up_ = false;
};

}  // namespace kforge::worker
