// Channel: framed JSON messages (plus optional file descriptors) over a Unix
// stream socket, between the coordinator and one worker process.
//
// Frame = u32 little-endian length + JSON text. File descriptors ride along as
// SCM_RIGHTS ancillary data on the frame's first byte.
#pragma once

#include <chrono>
#include <vector>

#include <nlohmann/json.hpp>

#include "kforge/core/status.h"

namespace kforge::eval {

struct Message {
  nlohmann::json body;
  std::vector<int> fds;  // received descriptors, owned by the receiver
};

class Channel {
 public:
  Channel() = default;
  explicit Channel(int fd) : fd_(fd) {}
  ~Channel();
  Channel(Channel&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Channel& operator=(Channel&& other) noexcept;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void Close();

  Status Send(const nlohmann::json& body, const std::vector<int>& fds = {});
  // Waits up to `timeout` for a whole message. kTimeout if none arrived;
  // kIo if the peer closed the socket (e.g. it crashed).
  Result<Message> Receive(std::chrono::milliseconds timeout);

 private:
  Status ReadExact(char* dst, size_t n, std::chrono::steady_clock::time_point deadline,
                   std::vector<int>* fds);
  int fd_ = -1;
};

// A connected pair (socketpair(AF_UNIX, SOCK_STREAM)); [0] for the parent.
Result<std::pair<int, int>> MakeSocketPair();

}  // namespace kforge::eval
