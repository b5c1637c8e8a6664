// The web UI over real HTTP on 127.0.0.1.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "kforge/results/fixture.h"
#include "kforge/results/server.h"
#include "kforge/results/store.h"
#include "test_util.h"

namespace kforge::results {
namespace {

class WebTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new testing::TempDir();
    FixtureSpec done;
    done.run_name = "finished";
    done.tasks = 3;
    done.samples = 1;
    done.strategies = {"refine"};
    done.emulated_models = {"model-c"};
    ASSERT_STATUS_OK(WriteFixtureRun(tmp_->path() / "finished", done));
    FixtureSpec live = done;
    live.run_name = "live";
    live.models = {"model-a"};
    live.finished = false;
    ASSERT_STATUS_OK(WriteFixtureRun(tmp_->path() / "live", live));
    ServerOptions options;
    options.port = 0;
    options.runs_root = tmp_->path();
    auto server = Server::Bind(options);
    ASSERT_OK(server);
    server_ = server->release();
    thread_ = new std::thread([] { (void)server_->Run(); });
  }
  static void TearDownTestSuite() {
    server_->Stop();
    thread_->join();
    delete thread_;
    delete server_;
    delete tmp_;
  }

  httplib::Result Get(const std::string& path) {
    httplib::Client client("127.0.0.1", server_->port());
    client.set_connection_timeout(5);
    client.set_read_timeout(10);
    return client.Get(path.c_str());
  }

  static testing::TempDir* tmp_;
  static Server* server_;
  static std::thread* thread_;
};
testing::TempDir* WebTest::tmp_ = nullptr;
Server* WebTest::server_ = nullptr;
std::thread* WebTest::thread_ = nullptr;

TEST_F(WebTest, LeaderboardPageListsModelsRunsAndCharts) {
  auto res = Get("/");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/html; charset=utf-8");
  for (const char* needle :
       {"model-a", "model-b", "model-c", "tag emulated", "chart-fastp", "chart-speedup",
        "chart-cost", "href=\"/run/finished\"", "href=\"/run/live\""}) {
    EXPECT_NE(res->body.find(needle), std::string::npos) << needle;
  }
  auto by = Get("/?by=model,category");
  ASSERT_TRUE(by);
  EXPECT_NE(by->body.find("<th class=\"l\">category</th>"), std::string::npos);
  auto bad = Get("/?by=colour");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
}

TEST_F(WebTest, RunPageShowsLiveProgress) {
  auto res = Get("/run/live");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_NE(res->body.find("data-state=\"running\""), std::string::npos);
  EXPECT_NE(res->body.find("id=\"count-pending\""), std::string::npos);
  EXPECT_NE(res->body.find("setInterval"), std::string::npos);
  auto progress = Get("/api/run/live/progress");
  ASSERT_TRUE(progress);
  ASSERT_EQ(progress->status, 200);
  auto j = nlohmann::json::parse(progress->body);
  EXPECT_EQ(j["state"], "running");
  EXPECT_EQ(j["counts"]["done"], 2);
  EXPECT_EQ(j["counts"]["pending"], 1);
  EXPECT_EQ(j["counts"]["evaluations"], 4);
  auto done = Get("/api/run/finished/progress");
  ASSERT_TRUE(done);
  EXPECT_EQ(nlohmann::json::parse(done->body)["state"], "done");
}

TEST_F(WebTest, SessionPageShowsTurnsKernelEvaluationFeedbackAndDiff) {
  auto run = Get("/run/finished");
  ASSERT_TRUE(run);
  const auto link = run->body.find("href=\"/session/finished/");
  ASSERT_NE(link, std::string::npos);
  const std::string path = run->body.substr(link + 6, run->body.find('"', link + 6) - link - 6);
  auto res = Get(path);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << path;
  for (const char* needle :
       {"Turn 1", "Turn 2", "<summary>prompt</summary>", "<summary>reply</summary>",
        "<span class=\"cu\">__global__</span>", "diff to the previous kernel",
        "<span class=\"add\">", "Evaluation: <span class=\"tag", "<summary>feedback</summary>"}) {
    EXPECT_NE(res->body.find(needle), std::string::npos) << needle;
  }
}

TEST_F(WebTest, TaskPageShowsEachModelsBestKernel) {
  auto res = Get("/task/001_t1");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  for (const char* needle :
       {"model-a · refine", "model-b · refine", "model-c · refine", "<pre class=\"code\">"}) {
    EXPECT_NE(res->body.find(needle), std::string::npos) << needle;
  }
}

TEST_F(WebTest, UnknownThingsAre404WithAPageThatSaysSo) {
  for (const char* path : {"/run/nope", "/session/finished/99999", "/task/none", "/nothing"}) {
    auto res = Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 404) << path;
    EXPECT_NE(res->body.find("<h1>404</h1>"), std::string::npos) << path << ": " << res->body;
  }
}

// The task page takes the names the CLI takes: key, number and name.
TEST_F(WebTest, TaskPageTakesTheTasksNumberAndName) {
  for (const char* path : {"/task/001_t1", "/task/1", "/task/t1"}) {
    auto res = Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 200) << path;
    EXPECT_NE(res->body.find("model-a · refine"), std::string::npos) << path;
  }
  auto none = Get("/task/12");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404) << "no task 12 in the fixture";
}

}  // namespace
}  // namespace kforge::results

namespace kforge::results {
namespace {

// A second server on a listening port must not share it (requests would go
// to either at random); a port past 65535 must not wrap around.
TEST_F(WebTest, BusyPortAndOutOfRangePortAreRefused) {
  // The suite's server must be serving before the suite stops it (a Stop()
  // before Run() starts would leave Run() waiting forever).
  ASSERT_TRUE(Get("/"));
  ServerOptions options;
  options.runs_root = tmp_->path();
  options.port = server_->port();
  auto second = Server::Bind(options);
  ASSERT_FALSE(second.ok()) << "bound a port another server listens on";
  EXPECT_NE(second.status().message().find(std::to_string(server_->port())), std::string::npos);
  options.port = 99999;
  auto wrapped = Server::Bind(options);
  ASSERT_FALSE(wrapped.ok());
  EXPECT_EQ(wrapped.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_NE(wrapped.status().message().find("1..65535"), std::string::npos);
}

}  // namespace
}  // namespace kforge::results

namespace kforge::results {
namespace {

// One damaged store turned the whole index into HTTP 400: it is left out
// and named, and the other runs still show.
TEST(WebDamageTest, ADamagedStoreIsNamedAndTheOthersStillShow) {
  testing::TempDir tmp;
  FixtureSpec good;
  good.run_name = "good";
  good.tasks = 2;
  good.samples = 1;
  ASSERT_STATUS_OK(WriteFixtureRun(tmp.path() / "good", good));
  std::filesystem::create_directories(tmp.path() / "bad");
  { std::ofstream(StorePath(tmp.path() / "bad")) << "this is not a database"; }
  ServerOptions options;
  options.port = 0;
  options.runs_root = tmp.path();
  auto server = Server::Bind(options);
  ASSERT_OK(server);
  std::thread t([&] { (void)(*server)->Run(); });
  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_read_timeout(10);
  auto res = client.Get("/");
  (*server)->Stop();
  t.join();
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_NE(res->body.find("skipped-runs"), std::string::npos);
  EXPECT_NE(res->body.find((tmp.path() / "bad").string()), std::string::npos) << res->body;
  EXPECT_NE(res->body.find("/run/good"), std::string::npos);
}

}  // namespace
}  // namespace kforge::results
