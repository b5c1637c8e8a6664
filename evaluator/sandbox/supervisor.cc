#include "sandbox/supervisor.h"

#include <errno.h>
#include <fmt/format.h>
#include <poll.h>
#include <seccomp.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "kforge/core/log.h"

namespace kforge::sandbox {

Supervisor::Supervisor() {
  const char* learn = std::getenv("KFORGE_SANDBOX_LEARN");
  learn_ = learn != nullptr && std::string(learn) == "1";
  thread_ = std::thread([this] { Loop(); });
}

Supervisor::~Supervisor() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  MutexLock lock(&mu_);
  for (const Watched& w : watched_) close(w.fd);
}

void Supervisor::Watch(int rank, int pid, int fd) {
  MutexLock lock(&mu_);
  watched_.push_back({rank, pid, fd});
}

void Supervisor::OnViolation(std::function<void()> fn) {
  MutexLock lock(&mu_);
  on_violation_ = std::move(fn);
}

std::vector<Violation> Supervisor::Violations() const {
  MutexLock lock(&mu_);
  return violations_;
}

void Supervisor::Loop() {
  seccomp_notif* req = nullptr;
  seccomp_notif_resp* resp = nullptr;
  if (seccomp_notify_alloc(&req, &resp) != 0) return;
  while (!stop_) {
    std::vector<Watched> watched;
    {
      MutexLock lock(&mu_);
      watched = watched_;
    }
    std::vector<pollfd> fds;
    for (const Watched& w : watched) fds.push_back({w.fd, POLLIN, 0});
    if (fds.empty()) {
      usleep(20 * 1000);
      continue;
    }
    int n = poll(fds.data(), fds.size(), 20);
    if (n <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents & (POLLHUP | POLLERR | POLLNVAL)) {
        // The process is gone; stop watching its listener.
        MutexLock lock(&mu_);
        for (auto it = watched_.begin(); it != watched_.end(); ++it) {
          if (it->fd == fds[i].fd) {
            close(it->fd);
            watched_.erase(it);
            break;
          }
        }
        continue;
      }
      if (!(fds[i].revents & POLLIN)) continue;
      std::memset(req, 0, sizeof(*req));
      if (seccomp_notify_receive(fds[i].fd, req) != 0) continue;
      Violation v;
      v.rank = watched[i].rank;
      v.pid = static_cast<int>(req->pid);
      char* name = seccomp_syscall_resolve_num_arch(req->data.arch, req->data.nr);
      v.syscall = name ? name : fmt::format("syscall {}", req->data.nr);
      std::free(name);
      for (int a = 0; a < 6; ++a) v.args[a] = req->data.args[a];
      std::memset(resp, 0, sizeof(*resp));
      resp->id = req->id;
      if (learn_) {
        resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
      } else {
        resp->error = -EPERM;
      }
      // Recorded before the answer: once the call returns in the confined
      // process, anyone who asks already sees it.
      std::function<void()> fn;
      {
        MutexLock lock(&mu_);
        bool first = violations_.empty();
        violations_.push_back(v);
        if (first && !learn_) fn = on_violation_;
      }
      (void)seccomp_notify_respond(fds[i].fd, resp);
      if (learn_) LogInfo("sandbox", "learn: rank {} used {}", v.rank, v.syscall);
      if (fn) fn();
    }
  }
  seccomp_notify_free(req, resp);
}

}  // namespace kforge::sandbox
