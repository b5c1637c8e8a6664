#include "kforge/agent/hardware_card.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace kforge::agent {
namespace {

using eval::HardwareCard;
using eval::HardwareCardFromJson;

TEST(HardwareCard, ShippedProfilesExpandToTheProbeShape) {
  for (const char* name : {"h100_8", "h200_8", "b200_8"}) {
    auto card = FindHardwareProfile(name, testing::PromptsDir());
    ASSERT_TRUE(card.ok()) << name << ": " << card.status().ToString();
    EXPECT_EQ(card->world, 8);
    ASSERT_EQ(card->gpus.size(), 8u);
    EXPECT_EQ(card->gpus[7].index, 7);
    EXPECT_EQ(card->p2p.size(), 8u);
    EXPECT_EQ(card->nvlink.size(), 56u);
    EXPECT_FALSE(card->emulated);
    EXPECT_GT(card->gpus[0].cc_major, 0) << name;
    EXPECT_GT(card->gpus[0].sm_count, 0) << name;
    EXPECT_GT(card->gpus[0].smem_per_block_optin, 0) << name;
    EXPECT_GT(card->gpus[0].l2_bytes, 0) << name;
    EXPECT_GT(card->gpus[0].hbm_bandwidth_gbps.value_or(0), 0) << name;
    // The card's JSON (stored with a run, sent by an eval-server) reads back
    // to the same card.
    auto back = HardwareCardFromJson(eval::ToJson(*card));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(eval::ToJson(*back), eval::ToJson(*card)) << name;
    EXPECT_EQ(RenderHardwareCard(*back), RenderHardwareCard(*card)) << name;
  }
}

TEST(HardwareCard, RendersTheNumbers) {
  auto card = FindHardwareProfile("h100_8", testing::PromptsDir());
  ASSERT_TRUE(card.ok());
  std::string md = RenderHardwareCard(card->Trimmed(4));
  EXPECT_NE(
      md.find("4 x NVIDIA H100 80GB HBM3 (compute capability 9.0, nvcc arch sm_90a), 132 SMs"),
      std::string::npos)
      << md;
  EXPECT_NE(md.find("L2 cache 50 MiB"), std::string::npos) << md;
  EXPECT_NE(md.find("at 3350 GB/s"), std::string::npos);
  EXPECT_NE(md.find("every GPU pair, 18 links, 450 GB/s"), std::string::npos) << md;
  EXPECT_NE(md.find("NCCL 2.21.5"), std::string::npos);
  EXPECT_DOUBLE_EQ(card->LinkPeakGbps(), 450);
}

TEST(HardwareCard, ProbedIntegerVersionsAreSpelledOut) {
  auto card = FindHardwareProfile("h200_8", testing::PromptsDir());
  ASSERT_TRUE(card.ok());
  // kforge-worker --probe reports the libraries' integers, not text.
  nlohmann::json probed = eval::ToJson(*card);
  probed["nccl_version"] = 22803;
  probed["cuda_driver_version"] = 13000;
  probed["cuda_runtime_version"] = 12080;
  auto read = HardwareCardFromJson(probed);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->nccl_version, "2.28.3");
  std::string md = RenderHardwareCard(*read);
  EXPECT_NE(md.find("NCCL 2.28.3, CUDA driver 13.0, CUDA runtime 12.8"), std::string::npos) << md;
}

TEST(HardwareCard, TrimKeepsTheFirstGpus) {
  auto card = FindHardwareProfile("b200_8", testing::PromptsDir());
  ASSERT_TRUE(card.ok());
  HardwareCard t = card->Trimmed(2);
  EXPECT_EQ(t.gpus.size(), 2u);
  EXPECT_EQ(t.p2p.size(), 2u);
  EXPECT_EQ(t.p2p[0].size(), 2u);
  EXPECT_EQ(t.nvlink.size(), 2u);
  EXPECT_EQ(t.world, 2);
  EXPECT_EQ(t.DeviceIndices(), (std::vector<int>{0, 1}));
  // A world that covers every GPU leaves the card as it is.
  EXPECT_EQ(eval::ToJson(card->Trimmed(8)), eval::ToJson(*card));
}

TEST(HardwareCard, EmulatedAndMissingP2pAreSaid) {
  nlohmann::json json = {{"gpus", {{{"index", 0}, {"name", "G"}}, {{"index", 1}, {"name", "G"}}}},
                         {"p2p", {{true, false}, {false, true}}},
                         {"nvlink", nlohmann::json::array()},
                         {"emulated", true}};
  auto card = HardwareCardFromJson(json);
  ASSERT_TRUE(card.ok()) << card.status().ToString();
  std::string md = RenderHardwareCard(*card);
  EXPECT_NE(md.find("NOT available"), std::string::npos) << md;
  EXPECT_NE(md.find("EMULATED"), std::string::npos);
  EXPECT_NE(md.find("over PCIe"), std::string::npos);
  card->gpus[0].nvlink_active_links = 18;  // the probe's shape: links per GPU, no per-peer list
  EXPECT_NE(RenderHardwareCard(*card).find("NVLink: 18 active links per GPU"), std::string::npos);
}

TEST(HardwareCard, AMalformedCardNamesTheField) {
  for (const auto& [json, field] : std::vector<std::pair<nlohmann::json, std::string>>{
           {{{"gpus", "all"}}, "\"gpus\""},
           {{{"gpus", {{{"index", -1}}}}}, "\"gpus[0].index\""},
           {{{"gpus", {{{"cc_major", "nine"}}}}}, "\"gpus[0].cc_major\""},
           {{{"p2p", {1}}}, "\"p2p[0]\""},
           {{{"nvlink", {1}}}, "\"nvlink[0]\""}}) {
    auto card = HardwareCardFromJson(json);
    ASSERT_FALSE(card.ok()) << json.dump();
    EXPECT_EQ(card.status().kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(card.status().message().find(field), std::string::npos) << card.status().message();
  }
  EXPECT_FALSE(HardwareCardFromJson(nlohmann::json::array()).ok());
}

TEST(HardwareCard, BadProfileNamesFileLineField) {
  auto r = ParseHardwareProfile(
      "world = 8\nnccl_version = \"x\"\ncuda_driver_version = \"x\"\n"
      "cuda_runtime_version = \"x\"\n[gpu]\nname = \"G\"\ncc_major = \"nine\"\n",
      "p.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "p.toml:7: gpu.cc_major: expected a non-negative integer");
}

}  // namespace
}  // namespace kforge::agent
