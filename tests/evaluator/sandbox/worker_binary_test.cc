// The worker executable itself: built so that a kernel loaded into it cannot
// patch where its calls go (docs/integrity.md, "The worker binary").
#include <elf.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "compile/elf_symbols.h"

namespace {

struct Elf {
  std::vector<char> bytes;
  const Elf64_Ehdr* header() const { return reinterpret_cast<const Elf64_Ehdr*>(bytes.data()); }
  template <typename T>
  const T* At(uint64_t off) const {
    return off + sizeof(T) <= bytes.size() ? reinterpret_cast<const T*>(bytes.data() + off)
                                           : nullptr;
  }
};

Elf Read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Elf{std::vector<char>(std::istreambuf_iterator<char>(f), {})};
}

TEST(WorkerBinary, LinksWithFullRelroAndBindNow) {
  Elf e = Read(KFORGE_WORKER_PATH);
  ASSERT_GE(e.bytes.size(), sizeof(Elf64_Ehdr)) << KFORGE_WORKER_PATH;
  ASSERT_EQ(std::string(e.bytes.data(), 4), std::string(ELFMAG, 4));
  const Elf64_Ehdr* h = e.header();
  bool relro = false, now = false;
  for (int i = 0; i < h->e_phnum; ++i) {
    const auto* ph = e.At<Elf64_Phdr>(h->e_phoff + static_cast<uint64_t>(i) * h->e_phentsize);
    ASSERT_NE(ph, nullptr);
    if (ph->p_type == PT_GNU_RELRO) relro = true;
    if (ph->p_type != PT_DYNAMIC) continue;
    for (uint64_t off = ph->p_offset; off + sizeof(Elf64_Dyn) <= ph->p_offset + ph->p_filesz;
         off += sizeof(Elf64_Dyn)) {
      const auto* d = e.At<Elf64_Dyn>(off);
      ASSERT_NE(d, nullptr);
      if (d->d_tag == DT_NULL) break;
      if (d->d_tag == DT_BIND_NOW) now = true;
      if (d->d_tag == DT_FLAGS && (d->d_un.d_val & DF_BIND_NOW)) now = true;
      if (d->d_tag == DT_FLAGS_1 && (d->d_un.d_val & DF_1_NOW)) now = true;
    }
  }
  EXPECT_TRUE(relro) << "no PT_GNU_RELRO segment";
  EXPECT_TRUE(now) << "imports are bound lazily: the GOT stays writable after start-up";
}

// NCCL is loaded only by the workers that need it (evaluator/worker/
// nccl_api.h): a candidate whose task forbids NCCL must find none in its
// process, so the worker may not depend on it. Nor on cuBLAS, cuFFT or cuDNN: a kernel that
// may use it links it itself.
TEST(WorkerBinary, DoesNotLinkTheLibrariesATaskMayForbid) {
  kforge::Result<kforge::eval::DynamicInfo> info =
      kforge::eval::ReadDynamicInfo(KFORGE_WORKER_PATH);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  ASSERT_FALSE(info->needed.empty());
  bool cudart = false;
  for (const std::string& lib : info->needed) {
    EXPECT_EQ(lib.find("nccl"), std::string::npos) << lib;
    EXPECT_EQ(lib.find("cublas"), std::string::npos) << lib;
    EXPECT_EQ(lib.find("cufft"), std::string::npos) << lib;
    EXPECT_EQ(lib.find("cudnn"), std::string::npos) << lib;
    cudart = cudart || lib.starts_with("libcudart");
  }
  EXPECT_TRUE(cudart) << "the reader did not see the worker's libraries";
}

}  // namespace
