#include "kernel_module.h"

#include <dlfcn.h>

#include "collectives.h"
#include "cuda_check.h"

namespace kforge::worker {

KernelModule::~KernelModule() { Unload(); }

Status KernelModule::Load(const std::string& path) {
  Unload();
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* err = dlerror();
    return Error(ErrorKind::kRuntimeError,
                 std::string("loading the kernel failed: ") + (err ? err : "?"));
  }
  auto fn = [&](const char* name) { return reinterpret_cast<KernelFn>(dlsym(h, name)); };
  run_ = fn("kf_run");
  if (run_ == nullptr) {
    dlclose(h);
    return Error(ErrorKind::kRuntimeError, "the kernel does not export kf_run (extern \"C\")");
  }
  setup_ = fn("kf_setup");
  teardown_ = fn("kf_teardown");
  handle_ = h;
  return Status::Ok();
}

void KernelModule::Unload() {
  if (handle_ == nullptr) return;
  if (set_up_) (void)Teardown();
  dlclose(handle_);
  handle_ = nullptr;
  setup_ = run_ = teardown_ = nullptr;
}

Status KernelModule::Setup(kf_ctx ctx) {
  if (handle_ == nullptr) return Error(ErrorKind::kHarness, "no kernel loaded");
  ctx.user = nullptr;
  ctx_ = ctx;
  if (setup_ != nullptr) {
    int rc = setup_(&ctx_);
    KF_CUDA(cudaDeviceSynchronize());
    KF_RETURN_IF_ERROR(TakeRefusal("kf_setup"));
    if (rc != 0) return Error(ErrorKind::kRuntimeError, NonZeroReturn("kf_setup", rc));
  }
  set_up_ = true;
  return Status::Ok();
}

int KernelModule::Run(kf_ctx ctx) {
  ctx.user = ctx_.user;
  int rc = run_(&ctx);
  ctx_.user = ctx.user;
  return rc;
}

Status KernelModule::Teardown() {
  if (!set_up_) return Status::Ok();
  set_up_ = false;
  if (teardown_ == nullptr) return Status::Ok();
  KF_CUDA(cudaDeviceSynchronize());
  int rc = teardown_(&ctx_);
  KF_CUDA(cudaDeviceSynchronize());
  if (rc != 0) return Error(ErrorKind::kRuntimeError, "kf_teardown returned " + std::to_string(rc));
  return Status::Ok();
}

}  // namespace kforge::worker
