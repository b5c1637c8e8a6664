// --dump: what one check trial writes, read back byte for byte.
#include "run/dump.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "kforge/core/npy.h"

namespace kforge::eval {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(DumpTest, WritesEveryRanksTensorsAndAManifest) {
  Problem p;
  p.world = 2;
  p.vars = {{"N", 3}};
  ConcreteTensor x;
  x.name = "x";
  x.dtype = Dtype::kBF16;
  x.shape = {3};
  x.numel = 3;
  x.nbytes = 6;
  p.inputs.push_back(x);
  ConcreteTensor y = x;
  y.name = "y";
  y.only_rank = 0;
  y.tolerance = {0.5, 0.25};
  p.outputs.push_back(y);
  HostInputs inputs = {{{1, 2, 3, 4, 5, 6}}, {{7, 8, 9, 10, 11, 12}}};
  std::vector<std::vector<std::vector<char>>> outputs = {{{'a', 'b', 'c', 'd', 'e', 'f'}},
                                                         {{'g', 'h', 'i', 'j', 'k', 'l'}}};
  OracleIo io;
  io.world = 2;
  io.outputs = {{{"y", {3}, {1.0, 2.0, 3.0}}}, {{"y", {3}, {4.0, 5.0, 6.0}}}};
  const fs::path dir = fs::temp_directory_path() / "kforge_dump_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  TrialTensors t{&p, "001_allreduce", "seven", Dtype::kBF16, 42, &inputs, &outputs, &io};
  ASSERT_TRUE(DumpTrial(dir, t).ok());
  t.size = "one";  // a second size extends the same manifest
  ASSERT_TRUE(DumpTrial(dir, t).ok());

  const int64_t shape[] = {3};
  const std::string in1 = Slurp(dir / "seven/rank1/input.x.npy");
  EXPECT_EQ(in1, NpyHeader("<u2", shape) + std::string("\x07\x08\x09\x0a\x0b\x0c", 6));
  EXPECT_EQ(Slurp(dir / "seven/rank0/output.y.npy"), NpyHeader("<u2", shape) + "abcdef");
  const std::string e1 = Slurp(dir / "one/rank1/expected.y.npy");
  double back[3];
  ASSERT_EQ(e1.size(), NpyHeader("<f8", shape).size() + sizeof(back));
  std::memcpy(back, e1.data() + NpyHeader("<f8", shape).size(), sizeof(back));
  EXPECT_EQ(back[2], 6.0);

  auto m = nlohmann::json::parse(Slurp(dir / "manifest.json"));
  EXPECT_EQ(m["schema"], "kforge.dump/1");
  EXPECT_EQ(m["task"], "001_allreduce");
  EXPECT_EQ(m["dtype"], "bf16");
  EXPECT_EQ(m["sizes"]["seven"]["seed"], 42);
  EXPECT_EQ(m["sizes"]["one"]["vars"]["N"], 3);
  ASSERT_EQ(m["files"].size(), 12u);  // 2 sizes x 2 ranks x (input, output, expected)
  int unchecked = 0;
  for (const auto& f : m["files"]) {
    EXPECT_TRUE(fs::exists(dir / f["path"].get<std::string>())) << f.dump();
    if (f["role"] == "expected" && !f["checked"].get<bool>()) ++unchecked;
    if (f["role"] == "input") {
      EXPECT_EQ(f["npy_dtype"], "<u2");
    }
  }
  EXPECT_EQ(unchecked, 2);  // y is checked on rank 0 only

  // Something that is not a manifest is never overwritten.
  std::ofstream(dir / "manifest.json") << "[1, 2]";
  EXPECT_FALSE(DumpTrial(dir, t).ok());
  EXPECT_EQ(Slurp(dir / "manifest.json"), "[1, 2]");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kforge::eval
