#include "protocol/channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kforge/abi_limits.h"

namespace kforge::eval {
namespace {

constexpr size_t kMaxFrame = 256u << 20;
// Two per rank (a split candidate arena's descriptors, protocol/messages.h), and a few more.
constexpr int kMaxFds = 2 * KF_MAX_RANKS + 4;

}  // namespace

Channel::~Channel() { Close(); }

Channel& Channel::operator=(Channel&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.fd_;
    pending_ = std::move(other.pending_);
    pending_fds_ = std::move(other.pending_fds_);
    other.fd_ = -1;
  }
  return *this;
}

void Channel::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  for (int fd : pending_fds_) close(fd);
  pending_fds_.clear();
  pending_.clear();
}

Status Channel::Send(const nlohmann::json& body, const std::vector<int>& fds) {
  if (fd_ < 0) return Error(ErrorKind::kIo, "channel closed");
  std::string text = body.dump();
  uint32_t len = static_cast<uint32_t>(text.size());
  std::string frame(reinterpret_cast<const char*>(&len), sizeof(len));
  frame += text;

  size_t sent = 0;
  bool fds_sent = fds.empty();
  while (sent < frame.size()) {
    iovec iov{frame.data() + sent, frame.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
    if (!fds_sent) {
      if (fds.size() > kMaxFds) return Error(ErrorKind::kInternal, "too many fds in one message");
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error(ErrorKind::kIo, std::string("send: ") + std::strerror(errno));
    }
    fds_sent = true;
    sent += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Result<bool> Channel::TakeFrame(Message* out) {
  if (pending_.size() < sizeof(uint32_t)) return false;
  uint32_t len = 0;
  std::memcpy(&len, pending_.data(), sizeof(len));
  if (len > kMaxFrame)
    return Error(ErrorKind::kIo, "oversized frame on channel (" + std::to_string(len) + " bytes)");
  if (pending_.size() < sizeof(len) + len) return false;
  try {
    out->body =
        nlohmann::json::parse(pending_.begin() + sizeof(len), pending_.begin() + sizeof(len) + len);
  } catch (const std::exception& e) {
    return Error(ErrorKind::kIo, std::string("malformed message: ") + e.what());
  }
  pending_.erase(0, sizeof(len) + len);
  // Descriptors travel with the first byte of their frame, so those received
  // so far belong to this frame.
  out->fds = std::move(pending_fds_);
  pending_fds_.clear();
  return true;
}

Result<Message> Channel::Receive(std::chrono::milliseconds timeout) {
  if (fd_ < 0) return Error(ErrorKind::kIo, "channel closed");
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[1 << 16];
  while (true) {
    Message m;
    KF_ASSIGN_OR_RETURN(bool whole, TakeFrame(&m));
    if (whole) return m;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() < 0) return Error(ErrorKind::kTimeout, "no message before the deadline");
    pollfd p{fd_, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (r < 0 && errno != EINTR)
      return Error(ErrorKind::kIo, std::string("poll: ") + std::strerror(errno));
    if (r <= 0) {
      if (std::chrono::steady_clock::now() >= deadline)
        return Error(ErrorKind::kTimeout, "no message before the deadline");
      continue;
    }
    iovec iov{buf, sizeof(buf)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t k = recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Error(ErrorKind::kIo, std::string("recv: ") + std::strerror(errno));
    }
    if (k == 0) return Error(ErrorKind::kIo, "peer closed the channel");
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        const int* in = reinterpret_cast<const int*>(CMSG_DATA(c));
        for (size_t i = 0; i < count; ++i) pending_fds_.push_back(in[i]);
      }
    }
    pending_.append(buf, static_cast<size_t>(k));
  }
}

Result<std::pair<int, int>> MakeSocketPair() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return Error(ErrorKind::kIo, std::string("socketpair: ") + std::strerror(errno));
  }
  return std::make_pair(sv[0], sv[1]);
}

}  // namespace kforge::eval
