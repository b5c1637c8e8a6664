// The harness worker makes bench inputs on the GPU and the coordinator makes
// the oracle's on the host, from one InputGen (task/input_gen.h): the bytes must
// agree bit for bit, for every dtype and every init kind, or the oracle checks
// values no kernel saw.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "device_ops.h"
#include "kforge/evaluator/task.h"
#include "task/inputs.h"

namespace kforge::eval {
namespace {

constexpr Dtype kDtypes[] = {Dtype::kF64,     Dtype::kF32,     Dtype::kF16, Dtype::kBF16,
                             Dtype::kFp8E4M3, Dtype::kFp8E5M2, Dtype::kI64, Dtype::kI32,
                             Dtype::kI8,      Dtype::kU8,      Dtype::kBool};

struct Case {
  std::string name;
  ConcreteTensor tensor;
};

// A [rows, cols] input at W = 4 with the init of each kind kforge has.
std::vector<Case> Cases(Dtype dt) {
  ConcreteTensor base;
  base.name = "x";
  base.dtype = dt;
  base.shape = {1003, 67};  // odd: no dimension a multiple of a block
  base.numel = 1003 * 67;
  base.nbytes = static_cast<size_t>(base.numel) * DtypeSize(dt);
  std::vector<Case> cases;
  auto add = [&](std::string name, auto&& edit) {
    Case c{std::move(name), base};
    edit(c.tensor);
    cases.push_back(std::move(c));
  };
  const bool floating = IsFloating(dt);
  if (floating) {
    add("normal", [](ConcreteTensor& t) { t.init_a = 0.5, t.init_b = 3.0; });
    add("normal with pieces", [](ConcreteTensor& t) {
      t.init_pieces = {{1000, 0.0, 0.01}, {40000, -2.0, 7.0}, {ConcreteTensor::Piece::kRest, 0, 1}};
    });
    add("normal with column offsets", [](ConcreteTensor& t) { t.init_column_std = 1.5; });
    add("normal, sharded along columns, with offsets", [](ConcreteTensor& t) {
      t.init_column_std = 0.75;
      t.distribution.kind = Distribution::Kind::kShard;
      t.distribution.dim = 1;
    });
    add("uniform", [](ConcreteTensor& t) {
      t.init = InitSpec::Kind::kUniform;
      t.init_a = -3.0, t.init_b = 5.0;
    });
    // Narrow dtypes repeat values within a row of 67 often: the row pass runs.
    add("normal with distinct rows and column offsets", [](ConcreteTensor& t) {
      t.init_column_std = 1.0;
      t.init_distinct = true;
    });
    add("uniform with distinct rows", [](ConcreteTensor& t) {
      t.init = InitSpec::Kind::kUniform;
      t.init_a = -1.0, t.init_b = 1.0;
      t.init_distinct = true;
    });
  }
  add("int", [dt](ConcreteTensor& t) {
    t.init = InitSpec::Kind::kInt;
    t.init_a = dt == Dtype::kBool ? 0 : (dt == Dtype::kU8 ? 0 : -100);
    t.init_b = dt == Dtype::kBool ? 1 : 100;
  });
  if (dt == Dtype::kF64 || dt == Dtype::kF32 || dt == Dtype::kI64 || dt == Dtype::kI32) {
    add("permutation", [](ConcreteTensor& t) { t.init = InitSpec::Kind::kPermutation; });
    add("permutation, sharded along rows", [](ConcreteTensor& t) {
      t.init = InitSpec::Kind::kPermutation;
      t.distribution.kind = Distribution::Kind::kShard;
      t.distribution.dim = 0;
    });
  }
  return cases;
}

class InputGenGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess || n == 0) {
      GTEST_SKIP() << "no CUDA device: "
                   << (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) {
      EXPECT_EQ(cudaStreamDestroy(stream_), cudaSuccess);
    }
  }
  cudaStream_t stream_ = nullptr;
};

TEST_F(InputGenGpuTest, DeviceBytesEqualTheHostGeneratorsForEveryDtypeAndInit) {
  int compared = 0;
  for (Dtype dt : kDtypes) {
    for (const Case& c : Cases(dt)) {
      Problem p;
      p.task_name = "input_gen_gpu_test";
      p.world = 4;
      p.dtype = dt;
      p.inputs = {c.tensor};
      for (int rank : {0, 3}) {
        const uint64_t seed = 0x5eed0000u + static_cast<uint64_t>(compared);
        const size_t bytes = p.inputs[0].NbytesOf(rank);
        const int64_t numel = p.inputs[0].NumelOf(rank);
        std::vector<char> host(bytes, 0x5A), device(bytes, 0x33);
        ASSERT_TRUE(GenerateInput(p, 0, rank, seed, host.data()).ok()) << c.name;
        auto g = MakeInputGen(p, 0, rank, seed);
        ASSERT_TRUE(g.ok()) << c.name << ": " << g.status().ToString();
        void* d = nullptr;
        ASSERT_EQ(cudaMalloc(&d, bytes), cudaSuccess);
        ASSERT_EQ(cudaMemsetAsync(d, 0x33, bytes, stream_), cudaSuccess);
        Status st = worker::LaunchGenerate(d, *g, static_cast<uint64_t>(numel), stream_);
        ASSERT_TRUE(st.ok()) << st.ToString();
        ASSERT_EQ(cudaMemcpyAsync(device.data(), d, bytes, cudaMemcpyDeviceToHost, stream_),
                  cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
        ASSERT_EQ(cudaFree(d), cudaSuccess);
        size_t first = 0;
        while (first < bytes && host[first] == device[first]) ++first;
        EXPECT_EQ(first, bytes) << DtypeName(dt) << " " << c.name << " rank " << rank
                                << ": first differing byte " << first << " of " << bytes;
        // Not a constant: a generator that wrote nothing (or one value) on both
        // sides would agree too.
        EXPECT_NE(std::string(host.begin(), host.begin() + bytes / 2),
                  std::string(host.begin() + bytes / 2, host.begin() + bytes / 2 * 2))
            << c.name;
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 2 * (5 * 6 + 11 + 2 * 4));
}

}  // namespace
}  // namespace kforge::eval
