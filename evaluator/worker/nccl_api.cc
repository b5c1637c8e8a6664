#include "nccl_api.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace kforge::worker {
namespace {

constexpr const char* kSoname = "libnccl.so.2";

template <typename Fn>
bool Bind(void* lib, const char* name, Fn* slot, std::string* missing) {
  *slot = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*slot == nullptr && missing->empty()) *missing = name;
  return *slot != nullptr;
}

Result<const NcclApi*> Load() {
  void* lib = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
#ifdef KFORGE_NCCL_LIBRARY
  // The library kforge was built against, where the loader's paths miss it.
  if (lib == nullptr) lib = dlopen(KFORGE_NCCL_LIBRARY, RTLD_NOW | RTLD_LOCAL);
#endif
  if (lib == nullptr) {
    const char* why = dlerror();
    return Error(ErrorKind::kNotFound,
                 std::string("cannot load NCCL (") + kSoname + "): " + (why ? why : "unknown"));
  }
  static NcclApi api;
  std::string missing;
  Bind(lib, "ncclGetVersion", &api.GetVersion, &missing);
  Bind(lib, "ncclGetUniqueId", &api.GetUniqueId, &missing);
  Bind(lib, "ncclGetErrorString", &api.GetErrorString, &missing);
  Bind(lib, "ncclCommInitRank", &api.CommInitRank, &missing);
  Bind(lib, "ncclCommSplit", &api.CommSplit, &missing);
  Bind(lib, "ncclCommDestroy", &api.CommDestroy, &missing);
  Bind(lib, "ncclCommCount", &api.CommCount, &missing);
  Bind(lib, "ncclAllReduce", &api.AllReduce, &missing);
  Bind(lib, "ncclAllGather", &api.AllGather, &missing);
  Bind(lib, "ncclReduceScatter", &api.ReduceScatter, &missing);
  Bind(lib, "ncclBroadcast", &api.Broadcast, &missing);
  Bind(lib, "ncclReduce", &api.Reduce, &missing);
  Bind(lib, "ncclSend", &api.Send, &missing);
  Bind(lib, "ncclRecv", &api.Recv, &missing);
  Bind(lib, "ncclGroupStart", &api.GroupStart, &missing);
  Bind(lib, "ncclGroupEnd", &api.GroupEnd, &missing);
  if (!missing.empty()) {
    return Error(ErrorKind::kNotFound,
                 std::string(kSoname) + " has no " + missing + " (NCCL 2.18 or later is needed)");
  }
  return &api;
}

}  // namespace

Result<const NcclApi*> Nccl() {
  static std::once_flag once;
  static Result<const NcclApi*> loaded = Error(ErrorKind::kInternal, "unset");
  std::call_once(once, [] { loaded = Load(); });
  return loaded;
}

bool NcclLoaded() {
  void* lib = dlopen(kSoname, RTLD_NOW | RTLD_NOLOAD);
  if (lib != nullptr) dlclose(lib);
  return lib != nullptr;
}

}  // namespace kforge::worker
