#include "profiler.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_result.h>
#include <cupti_target.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdint>

namespace kforge::worker {
namespace {

constexpr const char* kRangeName = "kf_run";

// The entry points used, from dlopen("libcupti.so").
struct CuptiApi {
  decltype(&cuptiGetResultString) GetResultString;
  decltype(&cuptiProfilerInitialize) Initialize;
  decltype(&cuptiProfilerDeInitialize) DeInitialize;
  decltype(&cuptiDeviceGetChipName) GetChipName;
  decltype(&cuptiProfilerGetCounterAvailability) GetCounterAvailability;
  decltype(&cuptiProfilerHostInitialize) HostInitialize;
  decltype(&cuptiProfilerHostDeinitialize) HostDeinitialize;
  decltype(&cuptiProfilerHostConfigAddMetrics) ConfigAddMetrics;
  decltype(&cuptiProfilerHostGetConfigImageSize) GetConfigImageSize;
  decltype(&cuptiProfilerHostGetConfigImage) GetConfigImage;
  decltype(&cuptiProfilerHostGetNumOfPasses) GetNumOfPasses;
  decltype(&cuptiProfilerHostEvaluateToGpuValues) EvaluateToGpuValues;
  decltype(&cuptiRangeProfilerEnable) Enable;
  decltype(&cuptiRangeProfilerDisable) Disable;
  decltype(&cuptiRangeProfilerGetCounterDataSize) GetCounterDataSize;
  decltype(&cuptiRangeProfilerCounterDataImageInitialize) CounterDataImageInitialize;
  decltype(&cuptiRangeProfilerSetConfig) SetConfig;
  decltype(&cuptiRangeProfilerStart) Start;
  decltype(&cuptiRangeProfilerStop) Stop;
  decltype(&cuptiRangeProfilerPushRange) PushRange;
  decltype(&cuptiRangeProfilerPopRange) PopRange;
  decltype(&cuptiRangeProfilerDecodeData) DecodeData;
  decltype(&cuptiRangeProfilerGetCounterDataInfo) GetCounterDataInfo;
};

template <typename Fn>
void Bind(void* lib, const char* name, Fn* slot, std::string* missing) {
  *slot = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*slot == nullptr && missing->empty()) *missing = name;
}

void* OpenCupti(std::string* why) {
  for (const char* name : {"libcupti.so.13", "libcupti.so.12", "libcupti.so"}) {
    if (void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return lib;
  }
#ifdef KFORGE_CUPTI_LIBRARY
  // The library kforge was built against, where the loader's paths miss it.
  if (void* lib = dlopen(KFORGE_CUPTI_LIBRARY, RTLD_NOW | RTLD_LOCAL)) return lib;
#endif
  const char* e = dlerror();
  *why = e ? e : "not found";
  return nullptr;
}

Result<const CuptiApi*> Load() {
  static CuptiApi api;
  static std::string failure;
  static bool loaded = false;
  if (loaded) return &api;
  if (!failure.empty()) return Error(ErrorKind::kNotFound, failure);
  std::string why;
  void* lib = OpenCupti(&why);
  if (lib == nullptr) {
    failure = "cannot load CUPTI (libcupti.so): " + why;
    return Error(ErrorKind::kNotFound, failure);
  }
  std::string missing;
  Bind(lib, "cuptiGetResultString", &api.GetResultString, &missing);
  Bind(lib, "cuptiProfilerInitialize", &api.Initialize, &missing);
  Bind(lib, "cuptiProfilerDeInitialize", &api.DeInitialize, &missing);
  Bind(lib, "cuptiDeviceGetChipName", &api.GetChipName, &missing);
  Bind(lib, "cuptiProfilerGetCounterAvailability", &api.GetCounterAvailability, &missing);
  Bind(lib, "cuptiProfilerHostInitialize", &api.HostInitialize, &missing);
  Bind(lib, "cuptiProfilerHostDeinitialize", &api.HostDeinitialize, &missing);
  Bind(lib, "cuptiProfilerHostConfigAddMetrics", &api.ConfigAddMetrics, &missing);
  Bind(lib, "cuptiProfilerHostGetConfigImageSize", &api.GetConfigImageSize, &missing);
  Bind(lib, "cuptiProfilerHostGetConfigImage", &api.GetConfigImage, &missing);
  Bind(lib, "cuptiProfilerHostGetNumOfPasses", &api.GetNumOfPasses, &missing);
  Bind(lib, "cuptiProfilerHostEvaluateToGpuValues", &api.EvaluateToGpuValues, &missing);
  Bind(lib, "cuptiRangeProfilerEnable", &api.Enable, &missing);
  Bind(lib, "cuptiRangeProfilerDisable", &api.Disable, &missing);
  Bind(lib, "cuptiRangeProfilerGetCounterDataSize", &api.GetCounterDataSize, &missing);
  Bind(lib, "cuptiRangeProfilerCounterDataImageInitialize", &api.CounterDataImageInitialize,
       &missing);
  Bind(lib, "cuptiRangeProfilerSetConfig", &api.SetConfig, &missing);
  Bind(lib, "cuptiRangeProfilerStart", &api.Start, &missing);
  Bind(lib, "cuptiRangeProfilerStop", &api.Stop, &missing);
  Bind(lib, "cuptiRangeProfilerPushRange", &api.PushRange, &missing);
  Bind(lib, "cuptiRangeProfilerPopRange", &api.PopRange, &missing);
  Bind(lib, "cuptiRangeProfilerDecodeData", &api.DecodeData, &missing);
  Bind(lib, "cuptiRangeProfilerGetCounterDataInfo", &api.GetCounterDataInfo, &missing);
  if (!missing.empty()) {
    failure = "libcupti.so has no " + missing + " (CUDA 12.6 or later is needed)";
    return Error(ErrorKind::kNotFound, failure);
  }
  loaded = true;
  return &api;
}

Status Check(const CuptiApi& api, CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return Status::Ok();
  const char* text = nullptr;
  if (api.GetResultString(r, &text) != CUPTI_SUCCESS || text == nullptr) text = "unknown";
  return Error(ErrorKind::kRuntimeError, std::string(what) + ": CUPTI error " +
                                             std::to_string(static_cast<int>(r)) + " (" + text +
                                             ")");
}

#define KF_CUPTI(api, call) KF_RETURN_IF_ERROR(Check((api), (call), #call))

template <typename P>
P Params(size_t size) {
  P p{};
  p.structSize = size;
  return p;
}
#define KF_PARAMS(T) Params<T>(T##_STRUCT_SIZE)

// The current CUDA context, from the driver library cudart has loaded.
Result<CUcontext> CurrentContext() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return Error(ErrorKind::kRuntimeError, "libcuda.so.1 is not loaded");
  auto get = reinterpret_cast<CUresult (*)(CUcontext*)>(dlsym(lib, "cuCtxGetCurrent"));
  CUcontext ctx = nullptr;
  if (get == nullptr || get(&ctx) != CUDA_SUCCESS || ctx == nullptr)
    return Error(ErrorKind::kRuntimeError, "no current CUDA context to profile");
  return ctx;
}

std::vector<const char*> Names(const std::vector<std::string>& v) {
  std::vector<const char*> out;
  for (const auto& s : v) out.push_back(s.c_str());
  return out;
}

}  // namespace

struct RangeProfiler::State {
  const CuptiApi* api = nullptr;
  bool initialized = false;
  CUpti_RangeProfiler_Object* object = nullptr;
  CUpti_Profiler_Host_Object* host = nullptr;
  std::string chip;
  std::vector<uint8_t> availability, config, counter_data;
  std::vector<std::string> metrics;
  std::vector<std::pair<std::string, std::string>> dropped;
  int passes = 0, submitted = 0;
  bool all_submitted = false, in_range = false, configured = false;

  ~State() {
    if (api == nullptr) return;
    if (object != nullptr) {
      auto d = KF_PARAMS(CUpti_RangeProfiler_Disable_Params);
      d.pRangeProfilerObject = object;
      (void)api->Disable(&d);
    }
    DropHost();
    if (initialized) {
      auto p = KF_PARAMS(CUpti_Profiler_DeInitialize_Params);
      (void)api->DeInitialize(&p);
    }
  }

  void DropHost() {
    if (host == nullptr) return;
    auto p = KF_PARAMS(CUpti_Profiler_Host_Deinitialize_Params);
    p.pHostObject = host;
    (void)api->HostDeinitialize(&p);
    host = nullptr;
  }

  // A host object configured with `names`; its config image and passes.
  Status Build(const std::vector<std::string>& names) {
    DropHost();
    auto init = KF_PARAMS(CUpti_Profiler_Host_Initialize_Params);
    init.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    init.pChipName = chip.c_str();
    init.pCounterAvailabilityImage = availability.data();
    KF_CUPTI(*api, api->HostInitialize(&init));
    host = init.pHostObject;
    std::vector<const char*> n = Names(names);
    auto add = KF_PARAMS(CUpti_Profiler_Host_ConfigAddMetrics_Params);
    add.pHostObject = host;
    add.ppMetricNames = n.data();
    add.numMetrics = n.size();
    KF_CUPTI(*api, api->ConfigAddMetrics(&add));
    auto size = KF_PARAMS(CUpti_Profiler_Host_GetConfigImageSize_Params);
    size.pHostObject = host;
    KF_CUPTI(*api, api->GetConfigImageSize(&size));
    config.assign(size.configImageSize, 0);
    auto image = KF_PARAMS(CUpti_Profiler_Host_GetConfigImage_Params);
    image.pHostObject = host;
    image.configImageSize = config.size();
    image.pConfigImage = config.data();
    KF_CUPTI(*api, api->GetConfigImage(&image));
    auto np = KF_PARAMS(CUpti_Profiler_Host_GetNumOfPasses_Params);
    np.configImageSize = config.size();
    np.pConfigImage = config.data();
    KF_CUPTI(*api, api->GetNumOfPasses(&np));
    passes = static_cast<int>(np.numOfPasses);
    metrics = names;
    return Status::Ok();
  }
};

RangeProfiler::RangeProfiler(std::unique_ptr<State> state) : s_(std::move(state)) {}
RangeProfiler::~RangeProfiler() = default;

const std::vector<std::string>& RangeProfiler::metrics() const { return s_->metrics; }
const std::vector<std::pair<std::string, std::string>>& RangeProfiler::dropped() const {
  return s_->dropped;
}
int RangeProfiler::passes() const { return s_->passes; }
bool RangeProfiler::done() const { return s_->all_submitted; }

Result<std::unique_ptr<RangeProfiler>> RangeProfiler::Create(const std::vector<std::string>& wanted,
                                                             int max_passes) {
  KF_ASSIGN_OR_RETURN(const CuptiApi* api, Load());
  auto s = std::make_unique<State>();
  s->api = api;
  auto init = KF_PARAMS(CUpti_Profiler_Initialize_Params);
  KF_CUPTI(*api, api->Initialize(&init));
  s->initialized = true;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess)
    return Error(ErrorKind::kRuntimeError, "profiler: no current CUDA device");
  KF_ASSIGN_OR_RETURN(CUcontext ctx, CurrentContext());

  auto chip = KF_PARAMS(CUpti_Device_GetChipName_Params);
  chip.deviceIndex = static_cast<size_t>(device);
  KF_CUPTI(*api, api->GetChipName(&chip));
  s->chip = chip.pChipName != nullptr ? chip.pChipName : "";

  auto avail = KF_PARAMS(CUpti_Profiler_GetCounterAvailability_Params);
  avail.ctx = ctx;
  KF_CUPTI(*api, api->GetCounterAvailability(&avail));
  s->availability.assign(avail.counterAvailabilityImageSize, 0);
  avail.pCounterAvailabilityImage = s->availability.data();
  KF_CUPTI(*api, api->GetCounterAvailability(&avail));

  // All at once; else one by one, keeping each metric this chip has that
  // still fits the passes.
  if (Status all = s->Build(wanted); !all.ok() || s->passes > max_passes) {
    std::vector<std::string> kept;
    Status last = all;
    for (const auto& m : wanted) {
      std::vector<std::string> next = kept;
      next.push_back(m);
      if (Status st = s->Build(next); st.ok() && s->passes <= max_passes) {
        kept = std::move(next);
      } else if (!st.ok()) {
        s->dropped.emplace_back(m, st.message());
        last = st;
      } else {
        s->dropped.emplace_back(m, std::to_string(s->passes) + " passes with it");
      }
    }
    if (kept.empty())
      return Error(ErrorKind::kRuntimeError, "profiler: no metric fits: " + last.message());
    KF_RETURN_IF_ERROR(s->Build(kept));
  }

  auto enable = KF_PARAMS(CUpti_RangeProfiler_Enable_Params);
  enable.ctx = ctx;
  KF_CUPTI(*api, api->Enable(&enable));
  s->object = enable.pRangeProfilerObject;

  std::vector<const char*> names = Names(s->metrics);
  auto size = KF_PARAMS(CUpti_RangeProfiler_GetCounterDataSize_Params);
  size.pRangeProfilerObject = s->object;
  size.pMetricNames = names.data();
  size.numMetrics = names.size();
  size.maxNumOfRanges = 1;
  size.maxNumRangeTreeNodes = 1;
  KF_CUPTI(*api, api->GetCounterDataSize(&size));
  s->counter_data.assign(size.counterDataSize, 0);
  auto ci = KF_PARAMS(CUpti_RangeProfiler_CounterDataImage_Initialize_Params);
  ci.pRangeProfilerObject = s->object;
  ci.counterDataSize = s->counter_data.size();
  ci.pCounterData = s->counter_data.data();
  KF_CUPTI(*api, api->CounterDataImageInitialize(&ci));

  auto cfg = KF_PARAMS(CUpti_RangeProfiler_SetConfig_Params);
  cfg.pRangeProfilerObject = s->object;
  cfg.configSize = s->config.size();
  cfg.pConfig = s->config.data();
  cfg.counterDataImageSize = s->counter_data.size();
  cfg.pCounterDataImage = s->counter_data.data();
  cfg.range = CUPTI_UserRange;
  cfg.replayMode = CUPTI_UserReplay;
  cfg.maxRangesPerPass = 1;
  cfg.numNestingLevels = 1;
  cfg.minNestingLevel = 1;
  cfg.passIndex = 0;
  cfg.targetNestingLevel = 1;
  KF_CUPTI(*api, api->SetConfig(&cfg));
  s->configured = true;
  return std::unique_ptr<RangeProfiler>(new RangeProfiler(std::move(s)));
}

Status RangeProfiler::Begin() {
  if (s_->all_submitted) return Status::Ok();
  if (s_->in_range) return Error(ErrorKind::kInternal, "profiler: Begin twice");
  const CuptiApi& api = *s_->api;
  auto start = KF_PARAMS(CUpti_RangeProfiler_Start_Params);
  start.pRangeProfilerObject = s_->object;
  KF_CUPTI(api, api.Start(&start));
  auto push = KF_PARAMS(CUpti_RangeProfiler_PushRange_Params);
  push.pRangeProfilerObject = s_->object;
  push.pRangeName = kRangeName;
  KF_CUPTI(api, api.PushRange(&push));
  s_->in_range = true;
  return Status::Ok();
}

Status RangeProfiler::End() {
  if (!s_->in_range) return Status::Ok();
  s_->in_range = false;
  const CuptiApi& api = *s_->api;
  auto pop = KF_PARAMS(CUpti_RangeProfiler_PopRange_Params);
  pop.pRangeProfilerObject = s_->object;
  KF_CUPTI(api, api.PopRange(&pop));
  auto stop = KF_PARAMS(CUpti_RangeProfiler_Stop_Params);
  stop.pRangeProfilerObject = s_->object;
  KF_CUPTI(api, api.Stop(&stop));
  ++s_->submitted;
  s_->all_submitted = stop.isAllPassSubmitted != 0;
  return Status::Ok();
}

Result<std::vector<std::pair<std::string, double>>> RangeProfiler::Values() {
  if (!s_->all_submitted) {
    return Error(ErrorKind::kRuntimeError, "profiler: " + std::to_string(s_->submitted) + " of " +
                                               std::to_string(s_->passes) + " passes collected");
  }
  const CuptiApi& api = *s_->api;
  auto decode = KF_PARAMS(CUpti_RangeProfiler_DecodeData_Params);
  decode.pRangeProfilerObject = s_->object;
  KF_CUPTI(api, api.DecodeData(&decode));
  auto info = KF_PARAMS(CUpti_RangeProfiler_GetCounterDataInfo_Params);
  info.pCounterDataImage = s_->counter_data.data();
  info.counterDataImageSize = s_->counter_data.size();
  KF_CUPTI(api, api.GetCounterDataInfo(&info));
  if (info.numTotalRanges < 1)
    return Error(ErrorKind::kRuntimeError, "profiler: no range was recorded");
  std::vector<const char*> names = Names(s_->metrics);
  std::vector<double> values(names.size(), 0);
  auto eval = KF_PARAMS(CUpti_Profiler_Host_EvaluateToGpuValues_Params);
  eval.pHostObject = s_->host;
  eval.pCounterDataImage = s_->counter_data.data();
  eval.counterDataImageSize = s_->counter_data.size();
  eval.rangeIndex = 0;
  eval.ppMetricNames = names.data();
  eval.numMetrics = names.size();
  eval.pMetricValues = values.data();
  KF_CUPTI(api, api.EvaluateToGpuValues(&eval));
  std::vector<std::pair<std::string, double>> out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (std::isfinite(values[i])) out.emplace_back(s_->metrics[i], values[i]);
  }
  return out;
}

}  // namespace kforge::worker
