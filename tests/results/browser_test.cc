// The web UI in a real browser: headless Chromium against `kforge serve`'s
// server on a fixture store. Checks the rendered DOM (charts present as SVG
// elements) and that a screenshot is not blank and shows the chart colours.
#include <gtest/gtest.h>
#include <httplib.h>
#if KFORGE_HAVE_ZLIB
#include <zlib.h>
#endif

#include <cstdlib>
#include <thread>

#include "kforge/core/fs.h"
#include "kforge/core/subprocess.h"
#include "kforge/results/fixture.h"
#include "kforge/results/server.h"
#include "kforge/results/store.h"
#include "test_util.h"

namespace kforge::results {
namespace {

constexpr const char* kChromium = "/usr/bin/chromium";

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // 3 bytes a pixel
};

#if KFORGE_HAVE_ZLIB
uint32_t Be32(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) |
         (uint32_t(uint8_t(s[at + 2])) << 8) | uint32_t(uint8_t(s[at + 3]));
}

// Decodes the 8-bit RGB/RGBA non-interlaced PNGs Chromium writes.
Result<Image> DecodePng(const std::string& png) {
  if (png.size() < 33 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0)
    return Error(ErrorKind::kInvalidInput, "not a PNG");
  Image img;
  int channels = 0;
  std::string idat;
  for (size_t at = 8; at + 8 <= png.size();) {
    const uint32_t len = Be32(png, at);
    const std::string type = png.substr(at + 4, 4);
    if (at + 12 + len > png.size()) return Error(ErrorKind::kInvalidInput, "truncated PNG");
    if (type == "IHDR") {
      img.width = static_cast<int>(Be32(png, at + 8));
      img.height = static_cast<int>(Be32(png, at + 12));
      const int depth = uint8_t(png[at + 16]), colour = uint8_t(png[at + 17]),
                interlace = uint8_t(png[at + 20]);
      if (depth != 8 || (colour != 2 && colour != 6) || interlace != 0) {
        return Error(ErrorKind::kInvalidInput, "unsupported PNG layout");
      }
      channels = colour == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      idat += png.substr(at + 8, len);
    }
    at += 12 + len;
  }
  const size_t stride = static_cast<size_t>(img.width) * channels;
  std::vector<uint8_t> raw((stride + 1) * img.height);
  uLongf raw_len = raw.size();
  if (uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) !=
      Z_OK) {
    return Error(ErrorKind::kInvalidInput, "bad PNG data");
  }
  std::vector<uint8_t> prev(stride, 0), cur(stride);
  img.rgb.reserve(static_cast<size_t>(img.width) * img.height * 3);
  for (int y = 0; y < img.height; ++y) {
    const uint8_t* line = raw.data() + y * (stride + 1);
    const int filter = line[0];
    for (size_t x = 0; x < stride; ++x) {
      const int a = x >= size_t(channels) ? cur[x - channels] : 0, b = prev[x],
                c = x >= size_t(channels) ? prev[x - channels] : 0;
      int pred = 0;
      switch (filter) {
        case 1:
          pred = a;
          break;
        case 2:
          pred = b;
          break;
        case 3:
          pred = (a + b) / 2;
          break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          pred = pa <= pb && pa <= pc ? a : (pb <= pc ? b : c);
          break;
        }
        default:
          pred = 0;
      }
      cur[x] = static_cast<uint8_t>(line[1 + x] + pred);
    }
    for (int x = 0; x < img.width; ++x) {
      for (int k = 0; k < 3; ++k) img.rgb.push_back(cur[x * channels + k]);
    }
    prev = cur;
  }
  return img;
}
#endif  // KFORGE_HAVE_ZLIB

class BrowserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kChromium))
      GTEST_SKIP() << kChromium << " is absent (scripts/install-deps.sh --with-browser)";
    FixtureSpec spec;
    spec.run_name = "fixture";
    spec.tasks = 3;
    spec.samples = 1;
    spec.strategies = {"refine"};
    spec.emulated_models = {"model-c"};
    ASSERT_STATUS_OK(WriteFixtureRun(tmp_.path() / "runs" / "fixture", spec));
    ServerOptions options;
    options.port = 0;
    options.runs_root = tmp_.path() / "runs";
    auto server = Server::Bind(options);
    ASSERT_OK(server);
    server_ = std::move(*server);
    thread_ = std::thread([this] { (void)server_->Run(); });
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
  }

  // Runs headless Chromium with a fresh profile; flags keep it off the network.
  ProcessResult Chromium(std::vector<std::string> args) {
    const auto profile = tmp_.path() / ("profile-" + std::to_string(++profiles_));
    std::vector<std::string> argv = {kChromium,
                                     "--headless",
                                     "--no-sandbox",
                                     "--disable-gpu",
                                     "--disable-quic",
                                     "--no-first-run",
                                     "--disable-background-networking",
                                     "--disable-component-update",
                                     "--disable-sync",
                                     "--disable-dev-shm-usage",
                                     "--user-data-dir=" + profile.string()};
    argv.insert(argv.end(), args.begin(), args.end());
    ProcessOptions options;
    options.timeout = std::chrono::seconds(60);
    auto r = RealProcessRunner().Run(argv, options);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : ProcessResult{};
  }

  std::string Url(const std::string& path) {
    return "http://127.0.0.1:" + std::to_string(server_->port()) + path;
  }

  testing::TempDir tmp_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
  int profiles_ = 0;
};

TEST_F(BrowserTest, LeaderboardRendersChartsInTheDom) {
  const ProcessResult r = Chromium({"--dump-dom", Url("/")});
  ASSERT_TRUE(r.Succeeded()) << r.err;
  const std::string& dom = r.out;
  EXPECT_NE(dom.find("<h1>kforge leaderboard</h1>"), std::string::npos) << dom.substr(0, 500);
  for (const char* chart : {"chart chart-fastp", "chart chart-speedup", "chart chart-cost"}) {
    EXPECT_NE(dom.find(chart), std::string::npos) << chart;
  }
  // The parsed DOM holds one line series per row and the legend.
  size_t series = 0;
  for (size_t at = dom.find("<polyline"); at != std::string::npos;
       at = dom.find("<polyline", at + 1))
    ++series;
  EXPECT_EQ(series, 3u);
  EXPECT_NE(dom.find("class=\"legend\""), std::string::npos);
  EXPECT_NE(dom.find("model-c / refine [emulated]"), std::string::npos);
}

// A run whose one session compiled and was never evaluated (no GPU): the
// leaderboard on / and the run's page, as a browser shows them, say "not
// evaluated" for it and give it no correctness or speedup figure.
TEST_F(BrowserTest, ASessionNothingEvaluatedReadsNotEvaluatedNotZero) {
  {
    auto store = RunStore::Open(tmp_.path() / "runs" / "nogpu");
    ASSERT_OK(store);
    auto run = (*store)->CreateOrGetRun("nogpu", {}, "v", "h", {});
    ASSERT_OK(run);
    auto s = (*store)->UpsertSession(
        run->id, {"replay:only-compiled", "001_allreduce", "refine", 0, 2, "bf16", "collective"});
    ASSERT_OK(s);
    TurnRecord t;
    t.session_id = *s;
    t.prompt = "p";
    t.reply = "r";
    t.kernel = "kernel";
    ASSERT_OK((*store)->AppendTurn(t));
    ASSERT_STATUS_OK((*store)->AppendEvent(run->id, "compiled", {{"session", *s}, {"turn", 0}}));
    ASSERT_STATUS_OK((*store)->SetSessionState(*s, "stopped", "compiled; evaluation needs a GPU"));
  }
  for (const char* page : {"/", "/run/nogpu"}) {
    const ProcessResult r = Chromium({"--dump-dom", Url(page)});
    ASSERT_TRUE(r.Succeeded()) << r.err;
    const size_t at = r.out.find(">replay:only-compiled<");
    ASSERT_NE(at, std::string::npos) << page << "\n" << r.out.substr(0, 2000);
    const size_t row = r.out.rfind("<tr", at);
    const std::string cells = r.out.substr(row, r.out.find("</tr>", at) - row);
    EXPECT_NE(cells.find("not evaluated"), std::string::npos) << page << ": " << cells;
    EXPECT_EQ(cells.find("0.0%"), std::string::npos) << page << ": " << cells;
    EXPECT_EQ(cells.find("1.000x"), std::string::npos) << page << ": " << cells;
    EXPECT_NE(r.out.find("compiled; evaluation needs a GPU"), std::string::npos) << page;
    // The run page says first that no GPU judged it (the leaderboard page does not).
    EXPECT_EQ(r.out.find("No GPU judged 1 of the 1 sessions of this run") != std::string::npos,
              std::string(page) == "/run/nogpu")
        << page;
  }
}

TEST_F(BrowserTest, SessionPageRenders) {
  // The run page's links come over plain HTTP (one browser start per test is slow enough).
  httplib::Client client("127.0.0.1", server_->port());
  auto run = client.Get("/run/fixture");
  ASSERT_TRUE(run);
  EXPECT_EQ(run->body.find("No GPU judged"), std::string::npos) << "the fixture's runs were judged";
  const auto link = run->body.find("href=\"/session/fixture/");
  ASSERT_NE(link, std::string::npos);
  const std::string path = run->body.substr(link + 6, run->body.find('"', link + 6) - link - 6);
  const ProcessResult r = Chromium({"--dump-dom", Url(path)});
  ASSERT_TRUE(r.Succeeded()) << r.err;
  EXPECT_NE(r.out.find("<span class=\"cu\">__global__</span>"), std::string::npos);
  EXPECT_NE(r.out.find("class=\"diff\""), std::string::npos);
}

TEST_F(BrowserTest, ScreenshotIsNotBlankAndShowsTheCharts) {
#if !KFORGE_HAVE_ZLIB
  GTEST_SKIP() << "zlib1g-dev absent at build time: cannot decode the screenshot";
#else
  const auto shot = tmp_.path() / "shot.png";
  const ProcessResult r = Chromium(
      {"--screenshot=" + shot.string(), "--window-size=1280,1400", "--hide-scrollbars", Url("/")});
  ASSERT_TRUE(r.Succeeded()) << r.err;
  auto png = ReadFile(shot);
  ASSERT_OK(png);
  auto img = DecodePng(*png);
  ASSERT_OK(img);
  EXPECT_EQ(img->width, 1280);
  size_t non_white = 0, series_blue = 0;
  const size_t pixels = img->rgb.size() / 3;
  for (size_t i = 0; i < pixels; ++i) {
    const int r8 = img->rgb[3 * i], g8 = img->rgb[3 * i + 1], b8 = img->rgb[3 * i + 2];
    if (r8 < 240 || g8 < 240 || b8 < 240) ++non_white;
    // The first series colour, #1b6ac9, drawn by the SVG charts.
    if (std::abs(r8 - 0x1b) < 24 && std::abs(g8 - 0x6a) < 24 && std::abs(b8 - 0xc9) < 24)
      ++series_blue;
  }
  EXPECT_GT(non_white, pixels / 100) << "the page rendered blank";
  EXPECT_GT(series_blue, 200u) << "no chart series visible";
#endif
}

}  // namespace
}  // namespace kforge::results
