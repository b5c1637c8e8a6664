// A ProcessRunner for compile tests: answers `--version` itself and hands
// every other command line to a handler, counting calls and concurrency.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "kforge/core/subprocess.h"

namespace kforge::eval::testing {

class FakeRunner final : public ProcessRunner {
 public:
  using Handler =
      std::function<Result<ProcessResult>(const std::vector<std::string>&, const ProcessOptions&)>;
  explicit FakeRunner(Handler handler,
                      std::string version = "Cuda compilation tools, release 99.0, V99.0.1\n")
      : handler_(std::move(handler)), version_(std::move(version)) {}

  Result<ProcessResult> Run(const std::vector<std::string>& argv,
                            const ProcessOptions& options) override {
    if (argv.size() == 2 && argv[1] == "--version") {
      ProcessResult r;
      r.exit_code = 0;
      r.out = version_;
      return r;
    }
    compiles++;
    int now = ++running_;
    int seen = max_running.load();
    while (now > seen && !max_running.compare_exchange_weak(seen, now)) {
    }
    Result<ProcessResult> r = handler_(argv, options);
    --running_;
    return r;
  }

  std::atomic<int> compiles{0};
  std::atomic<int> max_running{0};

 private:
  Handler handler_;
  std::string version_;
  std::atomic<int> running_{0};
};

}  // namespace kforge::eval::testing
