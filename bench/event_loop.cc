// An independent timer of a kernel, for cross-checking kforge's claimed event
// times (bench/event_crosscheck.sh). Nothing of kforge's evaluator runs here
// but the task model (shapes, params, the host input generator) and the
// compiler: one process, one thread per rank, each rank with its own copy of
// the kernel's shared object (so its statics and device globals are per rank,
// as in separate processes), buffers from cudaMalloc, peers as device pointers
// (peer access enabled between GPUs), and per call: a barrier of the rank
// threads, an event, kf_run, an event. A call's time is the slowest rank's.
//
//   event_loop --task 001 --kernel k.cu [--world 2] [--size 1MiB] [--dtype bf16]
//              [--calls 400] [--warmup 50] [--sets N] [--tasks-dir DIR]
//
// With fewer GPUs than ranks, ranks share GPU 0 (ctx->emulated = 1), as
// kforge's emulated evaluations do. Kernels that call the harness collectives
// cannot run here (there is no harness); the task must forbid them. Prints
// one JSON line: {task, size, world, emulated, sets, calls, median_us,
// p10_us, p90_us, rank_median_us}.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "kforge/core/fs.h"
#include "kforge/evaluator/compile.h"
#include "kforge/evaluator/task.h"
#include "kforge/kernel.h"
#include "protocol/layout.h"
#include "protocol/problem_wire.h"
#include "task/inputs.h"

namespace {

namespace fs = std::filesystem;
using kforge::eval::ConcreteTensor;
using kforge::eval::Problem;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "event_loop: %s\n", message.c_str());
  std::exit(1);
}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Die(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}

struct Args {
  std::string task, kernel, size, dtype;
  fs::path tasks_dir = KFORGE_BENCH_TASKS_DIR;
  int world = 2, calls = 400, warmup = 50, sets = 0;
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) Die("missing a value after " + k);
    const std::string v = argv[++i];
    if (k == "--task")
      a.task = v;
    else if (k == "--kernel")
      a.kernel = v;
    else if (k == "--size")
      a.size = v;
    else if (k == "--dtype")
      a.dtype = v;
    else if (k == "--tasks-dir")
      a.tasks_dir = v;
    else if (k == "--world")
      a.world = std::atoi(v.c_str());
    else if (k == "--calls")
      a.calls = std::atoi(v.c_str());
    else if (k == "--warmup")
      a.warmup = std::atoi(v.c_str());
    else if (k == "--sets")
      a.sets = std::atoi(v.c_str());
    else
      Die("unknown flag " + k);
  }
  if (a.task.empty() || a.kernel.empty()) Die("--task and --kernel are required");
  if (a.world < 1 || a.world > KF_MAX_RANKS) Die("--world out of range");
  if (a.calls < 1 || a.warmup < 0) Die("--calls must be >= 1 and --warmup >= 0");
  return a;
}

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

using EntryFn = int (*)(kf_ctx*);

struct Rank {
  int device = 0;
  cudaStream_t stream = nullptr;
  std::vector<std::vector<void*>> inputs, outputs;  // [set][tensor]
  std::vector<void*> pristine;                      // [input]: inout inputs' contents
  void* workspace = nullptr;
  void* pad = nullptr;
  void* so = nullptr;
  EntryFn setup = nullptr, run = nullptr, teardown = nullptr;
  std::vector<kf_ctx> ctx;  // [set]
  std::vector<double> us;   // [call]
};

void* Alloc(size_t bytes) {
  void* p = nullptr;
  Check(cudaMalloc(&p, std::max<size_t>(bytes, 256)), "cudaMalloc");
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  auto tasks = kforge::eval::LoadTasks(a.tasks_dir);
  if (!tasks.ok()) Die(tasks.status().ToString());
  const kforge::eval::Task* task = nullptr;
  for (const auto& t : *tasks) {
    if (t.key == a.task || t.name == a.task || t.key.starts_with(a.task + "_")) task = &t;
  }
  if (task == nullptr) Die("no task " + a.task);
  if (task->policy.harness_collectives)
    Die(task->key + " allows the harness collectives, which need kforge's harness");
  const kforge::eval::SizeSpec* size = &task->bench_sizes.front();
  for (const auto& s : task->bench_sizes) {
    if (s.label == a.size) size = &s;
  }
  if (!a.size.empty() && size->label != a.size) Die("no bench size " + a.size);
  kforge::eval::Dtype dtype = task->dtypes.front();
  if (!a.dtype.empty()) {
    auto d = kforge::eval::ParseDtype(a.dtype);
    if (!d.ok()) Die(d.status().ToString());
    dtype = *d;
  }
  auto problem = kforge::eval::Instantiate(*task, a.world, dtype, *size, false);
  if (!problem.ok()) Die(problem.status().ToString());
  const Problem& p = *problem;

  // The kernel, compiled as kforge compiles it (the compile is not timed).
  auto source = kforge::ReadFile(a.kernel);
  if (!source.ok()) Die(source.status().ToString());
  int gpus = 0;
  Check(cudaGetDeviceCount(&gpus), "cudaGetDeviceCount");
  if (gpus < 1) Die("no GPU");
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  kforge::eval::Compiler compiler;
  kforge::eval::CompileJob job;
  job.source = *source;
  job.display_name = fs::path(a.kernel).filename().string();
  job.arch = fmt::format("sm_{}{}{}", prop.major, prop.minor, prop.major >= 9 ? "a" : "");
  if (task->policy.cublas) job.libraries.push_back("cublas");
  if (task->policy.cufft) job.libraries.push_back("cufft");
  if (task->policy.cudnn) job.libraries.push_back("cudnn");
  kforge::eval::CompileResult compiled = compiler.Compile(job);
  if (!compiled.status.ok()) Die("compile: " + compiled.status.ToString() + "\n" + compiled.log);

  const bool emulated = gpus < a.world;
  // Enough input/output sets that a call's data is not in L2 from the last
  // call on it (kforge rotates ceil(3 x L2 / bytes) sets, at most 64).
  size_t bytes = 0;
  for (const ConcreteTensor& t : p.inputs) bytes += t.NbytesOf(0);
  for (const ConcreteTensor& t : p.outputs) bytes += t.NbytesOf(0);
  const int sets = a.sets > 0 ? a.sets
                              : static_cast<int>(std::clamp<size_t>(
                                    (3 * static_cast<size_t>(prop.l2CacheSize) + bytes - 1) /
                                        std::max<size_t>(bytes, 1),
                                    1, 64));

  std::vector<Rank> ranks(static_cast<size_t>(a.world));
  const auto params = kforge::eval::proto::KernelParams(p);
  auto scratch = kforge::MakeTempDir("kforge-event-loop");
  if (!scratch.ok()) Die(scratch.status().ToString());

  // Allocate, fill and load, rank by rank (on the main thread).
  for (int r = 0; r < a.world; ++r) {
    Rank& k = ranks[static_cast<size_t>(r)];
    k.device = emulated ? 0 : r;
    Check(cudaSetDevice(k.device), "cudaSetDevice");
    if (!emulated) {
      for (int q = 0; q < a.world; ++q) {
        if (q == r) continue;
        cudaError_t e = cudaDeviceEnablePeerAccess(q, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
          Check(e, "cudaDeviceEnablePeerAccess");
        (void)cudaGetLastError();
      }
    }
    Check(cudaStreamCreateWithFlags(&k.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    k.inputs.resize(static_cast<size_t>(sets));
    k.outputs.resize(static_cast<size_t>(sets));
    for (int s = 0; s < sets; ++s) {
      for (const ConcreteTensor& t : p.inputs) k.inputs[s].push_back(Alloc(t.NbytesOf(r)));
      for (const ConcreteTensor& t : p.outputs) {
        k.outputs[s].push_back(t.inout_of >= 0 ? nullptr : Alloc(t.NbytesOf(r)));
      }
    }
    k.workspace = Alloc(p.workspace_bytes);
    k.pad = Alloc(kforge::eval::proto::kSignalPadBytes);
    Check(cudaMemset(k.pad, 0, kforge::eval::proto::kSignalPadBytes), "cudaMemset");
    // Its own copy of the object: dlopen of one path twice would share it.
    const fs::path copy = *scratch / fmt::format("rank{}.so", r);
    std::error_code ec;
    fs::copy_file(compiled.shared_object, copy, fs::copy_options::overwrite_existing, ec);
    if (ec) Die("copy " + compiled.shared_object.string() + ": " + ec.message());
    k.so = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (k.so == nullptr) Die(std::string("dlopen: ") + dlerror());
    k.setup = reinterpret_cast<EntryFn>(dlsym(k.so, "kf_setup"));
    k.run = reinterpret_cast<EntryFn>(dlsym(k.so, "kf_run"));
    k.teardown = reinterpret_cast<EntryFn>(dlsym(k.so, "kf_teardown"));
    if (k.run == nullptr) Die("the kernel has no kf_run");
  }
  // Inputs from the task's generator, one seed per set (as kforge's sets differ).
  for (int s = 0; s < sets; ++s) {
    auto host = kforge::eval::GenerateAllInputs(p, 1000 + static_cast<uint64_t>(s));
    if (!host.ok()) Die(host.status().ToString());
    for (int r = 0; r < a.world; ++r) {
      Rank& k = ranks[static_cast<size_t>(r)];
      Check(cudaSetDevice(k.device), "cudaSetDevice");
      for (size_t i = 0; i < p.inputs.size(); ++i) {
        const auto& b = (*host)[static_cast<size_t>(r)][i];
        Check(cudaMemcpy(k.inputs[s][i], b.data(), b.size(), cudaMemcpyHostToDevice), "upload");
        if (s == 0 && p.inputs[i].inout) {
          k.pristine.resize(p.inputs.size(), nullptr);
          k.pristine[i] = Alloc(b.size());
          Check(cudaMemcpy(k.pristine[i], b.data(), b.size(), cudaMemcpyHostToDevice), "upload");
        }
      }
    }
  }
  // Every rank's context, per set: the same ABI fields kforge's harness fills.
  for (int r = 0; r < a.world; ++r) {
    Rank& k = ranks[static_cast<size_t>(r)];
    for (int s = 0; s < sets; ++s) {
      kf_ctx c{};
      c.abi_version = KF_ABI_VERSION;
      c.rank = r;
      c.world_size = a.world;
      c.device = k.device;
      c.emulated = emulated ? 1 : 0;
      c.stream = k.stream;
      auto fill = [&](kf_tensor& t, const ConcreteTensor& spec, bool input, size_t index) {
        t.name = spec.name.c_str();
        t.dtype = static_cast<kf_dtype>(spec.dtype);
        const auto& shape = spec.ShapeOf(r);
        t.ndim = static_cast<int>(std::min<size_t>(shape.size(), KF_MAX_DIMS));
        for (int d = 0; d < t.ndim; ++d) t.shape[d] = shape[static_cast<size_t>(d)];
        t.numel = spec.NumelOf(r);
        t.nbytes = spec.NbytesOf(r);
        t.inout = input && spec.inout ? 1 : 0;
        for (int q = 0; q < a.world; ++q) {
          const Rank& peer = ranks[static_cast<size_t>(q)];
          t.peers[q] = input ? peer.inputs[s][index] : peer.outputs[s][index];
        }
        t.data = t.peers[r];
      };
      c.num_inputs = static_cast<int>(std::min<size_t>(p.inputs.size(), KF_MAX_TENSORS));
      for (int i = 0; i < c.num_inputs; ++i)
        fill(c.inputs[i], p.inputs[i], true, static_cast<size_t>(i));
      for (size_t o = 0; o < p.outputs.size() && c.num_outputs < KF_MAX_TENSORS; ++o) {
        if (p.outputs[o].inout_of >= 0) continue;
        fill(c.outputs[c.num_outputs++], p.outputs[o], false, o);
      }
      for (const auto& [name, value] : params) {
        if (c.num_params == KF_MAX_PARAMS) break;
        c.param_names[c.num_params] = name.c_str();
        c.param_values[c.num_params++] = value;
      }
      c.num_groups = static_cast<int>(std::min<size_t>(p.groups.size(), KF_MAX_GROUPS));
      for (int g = 0; g < c.num_groups; ++g) {
        const auto& group = p.groups[static_cast<size_t>(g)];
        kf_group& kg = c.groups[g];
        kg.name = group.name.c_str();
        const int index = group.IndexOf(r, a.world);
        const std::vector<int> members = group.Members(index, a.world);
        kg.size = static_cast<int>(members.size());
        kg.rank = group.RankIn(r, a.world);
        kg.index = index;
        for (int m = 0; m < kg.size && m < KF_MAX_RANKS; ++m)
          kg.ranks[m] = members[static_cast<size_t>(m)];
      }
      c.workspace.data = k.workspace;
      c.workspace.nbytes = p.workspace_bytes;
      c.signal_pad.data = k.pad;
      c.signal_pad.nbytes = kforge::eval::proto::kSignalPadBytes;
      for (int q = 0; q < a.world; ++q) {
        c.workspace.peers[q] = ranks[static_cast<size_t>(q)].workspace;
        c.signal_pad.peers[q] = ranks[static_cast<size_t>(q)].pad;
      }
      cudaDeviceProp dp{};
      Check(cudaGetDeviceProperties(&dp, k.device), "cudaGetDeviceProperties");
      const size_t name_len = std::min(std::strlen(dp.name), sizeof c.gpu.name - 1);
      std::memcpy(c.gpu.name, dp.name, name_len);  // c is zeroed: the name stays terminated
      c.gpu.cc_major = dp.major;
      c.gpu.cc_minor = dp.minor;
      c.gpu.sm_count = dp.multiProcessorCount;
      c.gpu.max_threads_per_block = dp.maxThreadsPerBlock;
      c.gpu.smem_per_block_optin = dp.sharedMemPerBlockOptin;
      c.gpu.smem_per_sm = dp.sharedMemPerMultiprocessor;
      c.gpu.l2_bytes = static_cast<size_t>(dp.l2CacheSize);
      c.gpu.hbm_bytes = dp.totalGlobalMem;
      c.gpu.p2p_all = emulated ? 1 : 0;
      k.ctx.push_back(c);
    }
  }

  // One thread per rank: setup, warm-up, timed calls, teardown.
  std::barrier sync(a.world);
  std::vector<std::thread> threads;
  std::vector<std::string> failures(static_cast<size_t>(a.world));
  for (int r = 0; r < a.world; ++r) {
    threads.emplace_back([&, r] {
      Rank& k = ranks[static_cast<size_t>(r)];
      auto fail = [&](const std::string& what) { failures[static_cast<size_t>(r)] = what; };
      Check(cudaSetDevice(k.device), "cudaSetDevice");
      if (k.setup != nullptr && k.setup(&k.ctx[0]) != 0) fail("kf_setup failed");
      for (auto& c : k.ctx) c.user = k.ctx[0].user;
      Check(cudaDeviceSynchronize(), "kf_setup");
      sync.arrive_and_wait();
      cudaEvent_t start, stop;
      Check(cudaEventCreate(&start), "cudaEventCreate");
      Check(cudaEventCreate(&stop), "cudaEventCreate");
      for (int call = 0; call < a.warmup + a.calls; ++call) {
        const int s = call % sets;
        // Outputs poisoned and in-place inputs restored before every call,
        // outside the timed interval, as kforge's harness does.
        for (size_t o = 0; o < p.outputs.size(); ++o) {
          if (k.outputs[s][o] == nullptr) continue;
          Check(cudaMemsetAsync(k.outputs[s][o], 0xFF, p.outputs[o].NbytesOf(r), k.stream),
                "poison");
        }
        for (size_t i = 0; i < k.pristine.size(); ++i) {
          if (k.pristine[i] == nullptr) continue;
          Check(cudaMemcpyAsync(k.inputs[s][i], k.pristine[i], p.inputs[i].NbytesOf(r),
                                cudaMemcpyDeviceToDevice, k.stream),
                "restore");
        }
        Check(cudaStreamSynchronize(k.stream), "restore");
        sync.arrive_and_wait();
        Check(cudaEventRecord(start, k.stream), "cudaEventRecord");
        const int rc = k.run(&k.ctx[s]);
        Check(cudaEventRecord(stop, k.stream), "cudaEventRecord");
        Check(cudaEventSynchronize(stop), "kf_run");
        if (rc != 0) fail(fmt::format("kf_run returned {}", rc));
        float ms = 0;
        Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        if (call >= a.warmup) k.us.push_back(ms * 1000.0);
      }
      sync.arrive_and_wait();
      if (k.teardown != nullptr) (void)k.teardown(&k.ctx[0]);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < a.world; ++r) {
    if (!failures[static_cast<size_t>(r)].empty())
      Die(fmt::format("rank {}: {}", r, failures[static_cast<size_t>(r)]));
  }
  std::vector<double> per_call(static_cast<size_t>(a.calls), 0.0);
  nlohmann::json rank_median = nlohmann::json::array();
  for (const Rank& k : ranks) {
    for (size_t i = 0; i < per_call.size(); ++i) per_call[i] = std::max(per_call[i], k.us[i]);
    rank_median.push_back(Quantile(k.us, 0.5));
  }
  std::error_code ec;
  fs::remove_all(*scratch, ec);
  nlohmann::json out = {{"task", task->key},
                        {"size", size->label},
                        {"world", a.world},
                        {"emulated", emulated},
                        {"sets", sets},
                        {"calls", a.calls},
                        {"median_us", Quantile(per_call, 0.5)},
                        {"p10_us", Quantile(per_call, 0.1)},
                        {"p90_us", Quantile(per_call, 0.9)},
                        {"rank_median_us", rank_median}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
