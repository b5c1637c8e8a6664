// OutputDrain: the stdout and stderr of a rank group's processes, read
// through one pipe per rank by a thread of the coordinator and kept bounded
// (BoundedCapture: head and tail), so that a candidate that floods them
// neither blocks on a full pipe nor reaches kforge's own output. What it
// kept goes into the result document (`candidate_output`), printable only.
#pragma once

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/core/untrusted_text.h"
#include "run/canary_scan.h"

namespace kforge::eval {

class OutputDrain {
 public:
  OutputDrain(size_t head_bytes, size_t tail_bytes)
      : head_bytes_(head_bytes), tail_bytes_(tail_bytes) {}
  ~OutputDrain();
  // A pipe for the next rank: returns its write end, which the caller gives
  // to the child (as 1 and 2) and then closes. Before Start only.
  Result<int> AddRank();
  // Reads every pipe until each reaches end of file or Finish is called.
  void Start();
  // Reads what is left until end of file (the processes are dead) or
  // `grace`, then stops. The kept output stays readable.
  void Finish(std::chrono::milliseconds grace);
  // [{"rank", "bytes", "cut_bytes", "text"}] for each rank that wrote anything.
  nlohmann::json ToJson() const;
  // From now on, every byte read (not only what is kept) is searched for
  // `needles` (run/canary_scan.h), across reads. Bytes read before are not.
  void Watch(const std::vector<std::string>& needles);
  // The lowest rank whose watched output held a needle, and where in that
  // rank's whole output.
  std::optional<std::pair<int, CanarySighting>> Sighting() const;

 private:
  void Run();

  size_t head_bytes_, tail_bytes_;
  std::vector<int> fds_;  // read ends; -1 once at end of file
  int stop_[2] = {-1, -1};
  mutable std::mutex mu_;
  std::vector<BoundedCapture> kept_;          // guarded by mu_
  std::vector<CanaryStreamScanner> watched_;  // guarded by mu_; [rank] once Watch was called
  std::thread thread_;
};

}  // namespace kforge::eval
