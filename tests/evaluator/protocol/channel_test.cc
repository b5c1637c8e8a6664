#include "protocol/channel.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "barrier_rounds.h"
#include "protocol/control_block.h"

namespace kforge::eval {
namespace {

TEST(ChannelTest, FramesRoundTripWithFileDescriptors) {
  auto pair = MakeSocketPair();
  ASSERT_TRUE(pair.ok());
  Channel a(pair->first), b(pair->second);
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  nlohmann::json big = {{"op", "x"}, {"blob", std::string(1 << 20, 'k')}};
  // Larger than the socket buffer: the send completes only while the other
  // side reads, so it runs on its own thread.
  Status sent;
  std::thread sender([&] { sent = a.Send(big, {pipefd[0]}); });
  auto m = b.Receive(std::chrono::seconds(5));
  sender.join();
  ASSERT_TRUE(sent.ok()) << sent.ToString();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->body, big);
  ASSERT_EQ(m->fds.size(), 1u);
  // The received descriptor is a real copy: data written to the pipe arrives.
  ASSERT_EQ(write(pipefd[1], "hi", 2), 2);
  char buf[2];
  ASSERT_EQ(read(m->fds[0], buf, 2), 2);
  EXPECT_EQ(std::string(buf, 2), "hi");
  close(m->fds[0]);
  close(pipefd[0]);
  close(pipefd[1]);
}

TEST(ChannelTest, ReceiveTimesOutAndDetectsClosedPeer) {
  auto pair = MakeSocketPair();
  ASSERT_TRUE(pair.ok());
  Channel a(pair->first), b(pair->second);
  auto m = b.Receive(std::chrono::milliseconds(50));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().kind(), ErrorKind::kTimeout);
  a.Close();
  m = b.Receive(std::chrono::seconds(1));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().kind(), ErrorKind::kIo);
}

TEST(ChannelTest, APartialFrameSurvivesATimeout) {
  auto pair = MakeSocketPair();
  ASSERT_TRUE(pair.ok());
  Channel b(pair->second);
  std::string body = nlohmann::json{{"op", "late"}, {"n", 42}}.dump();
  uint32_t len = static_cast<uint32_t>(body.size());
  std::string frame(reinterpret_cast<const char*>(&len), sizeof(len));
  frame += body;
  size_t half = frame.size() / 2;
  ASSERT_EQ(write(pair->first, frame.data(), half), static_cast<ssize_t>(half));
  auto m = b.Receive(std::chrono::milliseconds(20));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().kind(), ErrorKind::kTimeout);
  ASSERT_EQ(write(pair->first, frame.data() + half, frame.size() - half),
            static_cast<ssize_t>(frame.size() - half));
  m = b.Receive(std::chrono::seconds(1));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->body["n"], 42);
  close(pair->first);
}

TEST(ControlBlockTest, BarrierHoldsEveryProcessUntilAllArrive) {
  auto block = ControlBlock::Create(4);
  ASSERT_TRUE(block.ok());
  EXPECT_TRUE(BarrierRounds(*block, 4, 200));
}

TEST(ControlBlockTest, AbortReleasesAWaitingRank) {
  auto block = ControlBlock::Create(2);
  ASSERT_TRUE(block.ok());
  block->RaiseAbort();
  Status s = block->Barrier();  // the other rank never comes
  EXPECT_EQ(s.kind(), ErrorKind::kCancelled);
}

}  // namespace
}  // namespace kforge::eval
