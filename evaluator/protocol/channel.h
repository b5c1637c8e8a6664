// Channel: framed JSON messages (plus optional file descriptors) over a Unix
// stream socket, between the coordinator and one worker process.
//
// Frame = u32 little-endian length + JSON text. File descriptors ride along as
// SCM_RIGHTS ancillary data on the frame's first byte.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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
  Channel(Channel&& other) noexcept
      : fd_(other.fd_),
        pending_(std::move(other.pending_)),
        pending_fds_(std::move(other.pending_fds_)) {
    other.fd_ = -1;
  }
  Channel& operator=(Channel&& other) noexcept;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void Close();

  Status Send(const nlohmann::json& body, const std::vector<int>& fds = {});
  // Waits up to `timeout` for a whole message. kTimeout if none arrived (a
  // partly received message is kept for the next call); kIo if the peer
  // closed the socket (e.g. it crashed) or sent a malformed frame.
  Result<Message> Receive(std::chrono::milliseconds timeout);

 private:
  // Moves one complete frame out of pending_, if there is one.
  Result<bool> TakeFrame(Message* out);
  int fd_ = -1;
  std::string pending_;           // bytes received but not yet returned
  std::vector<int> pending_fds_;  // descriptors received with them
};

// A connected pair (socketpair(AF_UNIX, SOCK_STREAM)); [0] for the parent.
Result<std::pair<int, int>> MakeSocketPair();

}  // namespace kforge::eval
