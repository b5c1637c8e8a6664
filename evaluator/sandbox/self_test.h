// The sandbox self-test (kforge-worker --sandbox-check, and the sandbox's own
// test): a child process confines itself exactly as a candidate worker does,
// then tries what exploit kernels try; the parent supervises it. No GPU needed.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "sandbox/sandbox.h"

namespace kforge::sandbox {

struct Attempt {
  std::string what;  // "fork", "socket(AF_INET)", ...
  long result = 0;   // the raw result (-errno when refused)
  bool refused = false;
};

struct SelfTestResult {
  Report report;                      // the layers the machine granted
  bool notify = false;                // denials reported (else they kill: SIGSYS)
  bool killed_by_sigsys = false;      // without notification: the first denial killed the child
  std::vector<Attempt> attempts;      // with notification: every attempt and its outcome
  std::vector<std::string> reported;  // syscalls the supervisor saw
  // A file the child made in its /dev/shm is in the host's after it exited
  // (it must not be, under a private /dev/shm).
  bool shm_left_behind = false;
  bool Passed() const;  // every layer applied and every attempt refused
  nlohmann::json ToJson() const;
};

Result<SelfTestResult> RunSelfTest();

}  // namespace kforge::sandbox
