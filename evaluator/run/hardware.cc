#include "kforge/evaluator/hardware.h"

#include <unistd.h>

#include <cstdlib>

#include "kforge/core/json.h"
#include "kforge/core/subprocess.h"

namespace kforge::eval {

std::filesystem::path DefaultWorkerPath() {
  if (const char* w = std::getenv("KFORGE_WORKER"); w && *w) return w;
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) return self.parent_path() / "kforge-worker";
  return "kforge-worker";
}

Result<HardwareCard> ProbeHardware(const std::vector<int>& gpus,
                                   std::filesystem::path worker_path) {
  if (worker_path.empty()) worker_path = DefaultWorkerPath();
  std::vector<std::string> argv = {worker_path.string(), "--probe"};
  if (!gpus.empty()) {
    std::string list;
    for (int g : gpus) list += (list.empty() ? "" : ",") + std::to_string(g);
    argv.push_back("--devices");
    argv.push_back(list);
  }
  ProcessOptions opts;
  opts.timeout = std::chrono::seconds(60);
  KF_ASSIGN_OR_RETURN(ProcessResult r, RealProcessRunner().Run(argv, opts));
  if (!r.Succeeded()) {
    return Error(ErrorKind::kHarness, "kforge-worker --probe failed: " + r.err.substr(0, 2000));
  }
  Result<nlohmann::json> doc = ParseJson(r.out, "kforge-worker --probe's card");
  if (!doc.ok()) return Error(ErrorKind::kHarness, doc.status().message());
  Result<HardwareCard> card = HardwareCardFromJson(*doc);
  if (!card.ok()) {
    return Error(ErrorKind::kHarness, "kforge-worker --probe: " + card.status().message());
  }
  if (card->device_count == 0 || !card->has_gpu()) {
    return Error(ErrorKind::kNotFound,
                 card->error.empty() ? std::string("no CUDA device visible") : card->error);
  }
  // One rank per GPU unless a caller says otherwise.
  if (card->world == 0) card->world = static_cast<int>(card->gpus.size());
  return card;
}

}  // namespace kforge::eval
