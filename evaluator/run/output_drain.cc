#include "run/output_drain.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kforge::eval {

OutputDrain::~OutputDrain() {
  Finish(std::chrono::milliseconds(0));
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
  for (int fd : stop_) {
    if (fd >= 0) close(fd);
  }
}

Result<int> OutputDrain::AddRank() {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0)
    return Error(ErrorKind::kHarness, std::string("pipe: ") + std::strerror(errno));
  fds_.push_back(p[0]);
  kept_.emplace_back(head_bytes_, tail_bytes_);
  return p[1];
}

void OutputDrain::Start() {
  if (thread_.joinable() || pipe2(stop_, O_CLOEXEC) != 0) return;
  thread_ = std::thread([this] { Run(); });
}

void OutputDrain::Run() {
  std::vector<char> buf(1 << 16);
  while (true) {
    std::vector<pollfd> polls;
    std::vector<size_t> rank_of;
    for (size_t r = 0; r < fds_.size(); ++r) {
      if (fds_[r] < 0) continue;
      polls.push_back({fds_[r], POLLIN, 0});
      rank_of.push_back(r);
    }
    if (polls.empty()) return;
    polls.push_back({stop_[0], POLLIN, 0});
    if (poll(polls.data(), polls.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    const bool stopping = polls.back().revents != 0;
    bool read_any = false;
    for (size_t k = 0; k + 1 < polls.size(); ++k) {
      if (polls[k].revents == 0) continue;
      const size_t r = rank_of[k];
      ssize_t n = read(fds_[r], buf.data(), buf.size());
      if (n > 0) {
        read_any = true;
        std::lock_guard lock(mu_);
        const std::string_view piece(buf.data(), static_cast<size_t>(n));
        kept_[r].Append(piece);
        if (r < watched_.size()) watched_[r].Feed(piece);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        std::lock_guard lock(mu_);
        close(fds_[r]);
        fds_[r] = -1;
      }
    }
    // Asked to stop: return once a pass finds nothing more to read.
    if (stopping && !read_any) return;
  }
}

void OutputDrain::Finish(std::chrono::milliseconds grace) {
  if (!thread_.joinable()) return;
  // The thread ends by itself when every writer is gone; past the grace
  // (a descriptor still open somewhere), it is told to stop.
  auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline) {
    bool open = false;
    {
      std::lock_guard lock(mu_);
      for (int fd : fds_) open = open || fd >= 0;
    }
    if (!open) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  char one = 1;
  (void)!write(stop_[1], &one, 1);
  thread_.join();
}

nlohmann::json OutputDrain::ToJson() const {
  std::lock_guard lock(mu_);
  nlohmann::json out = nlohmann::json::array();
  for (size_t r = 0; r < kept_.size(); ++r) {
    if (kept_[r].total_bytes() == 0) continue;
    out.push_back({{"rank", r},
                   {"bytes", kept_[r].total_bytes()},
                   {"cut_bytes", kept_[r].cut_bytes()},
                   {"text", kept_[r].Text()}});
  }
  return out;
}

void OutputDrain::Watch(const std::vector<std::string>& needles) {
  std::lock_guard lock(mu_);
  watched_.clear();
  for (const BoundedCapture& k : kept_) watched_.emplace_back(needles, k.total_bytes());
}

std::optional<std::pair<int, CanarySighting>> OutputDrain::Sighting() const {
  std::lock_guard lock(mu_);
  for (size_t r = 0; r < watched_.size(); ++r) {
    if (watched_[r].sighting()) return std::pair{static_cast<int>(r), *watched_[r].sighting()};
  }
  return std::nullopt;
}

}  // namespace kforge::eval
