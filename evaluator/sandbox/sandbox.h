// The sandbox of untrusted code: every candidate process (kforge-worker in
// the candidate role) and every nvcc run on a candidate's source (through
// kforge-jail). docs/integrity.md explains what each layer stops.
//
// Layers, applied in this order by the confined process itself:
//   environment  spawned with a scrubbed environment (ScrubbedEnvironment);
//                checked again inside (no key, token or secret survives)
//   descriptors  nothing inherited but the channel, control block and mailbox
//   network      a private network namespace (no interface but a down lo)
//   privileges   no_new_privs, every capability dropped, not dumpable
//   limits       rlimits: no core dumps, bounded file size, CPU time
//   landlock     filesystem (read-only system paths and the candidate's own
//                directory, read-write GPU device nodes), TCP, signals and
//                abstract sockets outside the process (where the kernel's
//                Landlock ABI has them)
//   seccomp      a syscall allowlist for every thread: no new processes, no
//                exec, no new sockets, no signals to other processes, no
//                ptrace or process_vm_*; a denied call is reported to the
//                coordinator (user notification) and the evaluation rejected
// Where the machine refuses a layer, the report says so; evaluations with a
// partial sandbox are marked and kept off leaderboards by default.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::sandbox {

struct Layer {
  std::string name;
  bool applied = false;
  std::string detail;  // what was applied, or why not
};

struct Report {
  std::vector<Layer> layers;
  bool Complete() const;  // every layer applied
  std::vector<std::string> Missing() const;
  void Add(std::string name, bool applied, std::string detail);
  nlohmann::json ToJson() const;  // {"complete": b, "layers": [{name, applied, detail}]}
  static Report FromJson(const nlohmann::json& j);  // tolerant: a bad entry is a missing layer
  std::string Summary() const;  // "sandbox: complete" / "sandbox: partial, missing a, b"
};

// The names every complete candidate sandbox has, in order.
const std::vector<std::string>& CandidateLayers();

// ---- spawning --------------------------------------------------------------

// The environment a worker or a jailed tool gets: only the variables CUDA,
// NCCL and the loader need (LD_LIBRARY_PATH, CUDA_*, NCCL_*, KFORGE_WORKER_*,
// PATH for tools), plus `extra`. Never anything named like a credential.
std::vector<std::string> ScrubbedEnvironment(const std::map<std::string, std::string>& extra,
                                             bool keep_path);
// This process's environment, by name (the first of a repeated name).
std::map<std::string, std::string> ThisEnvironment();
// True for names that must never reach untrusted code (API keys, tokens, ...).
bool LooksSecret(const std::string& name);

// ---- inside the confined process ---------------------------------------------

struct Policy {
  // Landlock: read (and map/execute) beneath these paths; read-write beneath
  // these. Paths that do not exist are skipped.
  std::vector<std::string> read_paths;
  std::vector<std::string> write_paths;
  bool allow_tcp = false;            // NCCL bootstrap between ranks (real GPUs only)
  bool allow_sockets = false;        // seccomp: socket()/connect() (NCCL's proxy)
  bool private_network = true;       // unshare a network namespace
  bool private_shm = false;          // a tmpfs of its own on /dev/shm (a mount namespace)
  uint64_t shm_bytes = 64ull << 20;  // its size
  uint64_t cpu_seconds = 3600;       // RLIMIT_CPU
  uint64_t file_bytes = 1ull << 30;  // RLIMIT_FSIZE
};

// The default read/write paths of a candidate process: system libraries, the
// CUDA toolkit and driver files, /proc, /sys, the GPU device nodes, the MPS
// directory and `candidate_dir` (where its kernel.so will be), and a private
// /dev/shm unless KFORGE_SANDBOX_PRIVATE_SHM=0 (docs/integrity.md).
Policy CandidatePolicy(const std::string& candidate_dir, const std::string& mps_dir);

// Early layers, before CUDA starts any thread: environment check, inherited
// descriptors (keeps 0-2 and `keep_fds`), network namespace, IPC namespace,
// private /dev/shm, privileges, limits, Landlock. Applied to the calling (only) thread and
// inherited by every thread created after it.
void ApplyEarlyLayers(const Policy& policy, const std::vector<int>& keep_fds, Report* report);

// True when KFORGE_SANDBOX_SKIP (a comma list of layer names) leaves `layer`
// out: for finding which layer a machine's driver cannot live with. The report
// then says partial.
bool LayerSkipped(const char* layer);

// The seccomp filter, synchronised onto every thread (CUDA's included). With
// user notification the listener descriptor is returned in *listener (>= 0)
// and must be handed to the supervisor and closed here; otherwise denied
// calls kill the process (SIGSYS).
void ApplySeccomp(const Policy& policy, Report* report, int* listener);

// ---- the supervisor (coordinator side) -----------------------------------------

struct Violation {
  int rank = -1;
  int pid = 0;
  std::string syscall;  // e.g. "execve"
  uint64_t args[6] = {0, 0, 0, 0, 0, 0};
  std::string ToString() const;  // "rank 1 called execve (forbidden: new programs)"
};

// Why a syscall is forbidden, in words, for the result ("new processes").
std::string ForbiddenBecause(const std::string& syscall);

}  // namespace kforge::sandbox
