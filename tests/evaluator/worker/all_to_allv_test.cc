// kf_all_to_allv is one grouped exchange of the backend's own sends and
// receives: checked here on a backend that records what it is asked to do
// (no GPU needed), so that the displacement arithmetic and the group bracket
// are what both real backends receive.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "collectives.h"

namespace kforge::worker {
namespace {

class RecordingBackend final : public CollectiveBackend {
 public:
  std::vector<std::string> log;
  const char* base = nullptr;
  int fail_recv_from = -1;

  std::string Name() const override { return "recording"; }
  Status AllReduce(int, const void*, void*, size_t, kf_dtype, kf_redop, cudaStream_t) override {
    return Status::Ok();
  }
  Status AllGather(int, const void*, void*, size_t, kf_dtype, cudaStream_t) override {
    return Status::Ok();
  }
  Status ReduceScatter(int, const void*, void*, size_t, kf_dtype, kf_redop, cudaStream_t) override {
    return Status::Ok();
  }
  Status Broadcast(int, const void*, void*, size_t, kf_dtype, int, cudaStream_t) override {
    return Status::Ok();
  }
  Status Reduce(int, const void*, void*, size_t, kf_dtype, kf_redop, int, cudaStream_t) override {
    return Status::Ok();
  }
  Status AllToAll(int, const void*, void*, size_t, kf_dtype, cudaStream_t) override {
    return Status::Ok();
  }
  Status Barrier(int, cudaStream_t) override { return Status::Ok(); }
  Status GroupStart() override {
    log.push_back("start");
    return Status::Ok();
  }
  Status GroupEnd(cudaStream_t) override {
    log.push_back("end");
    return Status::Ok();
  }
  Status Send(const void* buf, size_t count, kf_dtype, int peer, cudaStream_t) override {
    log.push_back("send " + std::to_string(peer) + " @" +
                  std::to_string(static_cast<const char*>(buf) - base) + " n" +
                  std::to_string(count));
    return Status::Ok();
  }
  Status Recv(void* buf, size_t count, kf_dtype, int peer, cudaStream_t) override {
    if (peer == fail_recv_from) return Error(ErrorKind::kRuntimeError, "no matching send");
    log.push_back("recv " + std::to_string(peer) + " @" +
                  std::to_string(static_cast<const char*>(buf) - base) + " n" +
                  std::to_string(count));
    return Status::Ok();
  }
  Status SetGroups(const std::vector<GroupView>&) override { return Status::Ok(); }
};

TEST(AllToAllV, OneGroupOfSendsAndReceivesAtTheDisplacementsInBytes) {
  RecordingBackend b;
  std::vector<char> buf(4096);
  b.base = buf.data();
  const size_t send_counts[3] = {2, 0, 5}, send_displs[3] = {0, 2, 2};
  const size_t recv_counts[3] = {1, 3, 0}, recv_displs[3] = {100, 101, 104};
  // bf16: two bytes an element.
  ASSERT_TRUE(b.AllToAllV(3, buf.data(), send_counts, send_displs, buf.data(), recv_counts,
                          recv_displs, KF_BF16, nullptr)
                  .ok());
  const std::vector<std::string> want = {
      "start",          "send 0 @0 n2", "recv 0 @200 n1", "send 1 @4 n0",
      "recv 1 @202 n3", "send 2 @4 n5", "recv 2 @208 n0", "end"};
  EXPECT_EQ(b.log, want);
}

TEST(AllToAllV, AFailedReceiveStillClosesTheGroupAndIsReported) {
  RecordingBackend b;
  std::vector<char> buf(64);
  b.base = buf.data();
  b.fail_recv_from = 1;
  const size_t counts[2] = {1, 1}, displs[2] = {0, 1};
  Status st =
      b.AllToAllV(2, buf.data(), counts, displs, buf.data() + 32, counts, displs, KF_F32, nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("no matching send"), std::string::npos) << st.message();
  ASSERT_FALSE(b.log.empty());
  EXPECT_EQ(b.log.back(), "end");
}

TEST(AllToAllV, NullCountArraysAreRefused) {
  RecordingBackend b;
  const size_t counts[2] = {1, 1};
  Status st = b.AllToAllV(2, nullptr, counts, nullptr, nullptr, counts, counts, KF_F32, nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(b.log.empty());
}

}  // namespace
}  // namespace kforge::worker
