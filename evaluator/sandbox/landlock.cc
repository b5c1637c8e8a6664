// Landlock: the filesystem, TCP, signals and abstract sockets a confined
// process may reach. Raw syscalls (glibc has no wrappers); constants newer
// than the build machine's kernel headers are spelled out here, and the
// ruleset is sized to the ABI the running kernel reports.
#include "sandbox/landlock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/landlock.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kforge::sandbox {
namespace {

// ABI 3 (Linux 6.2) and 5 (6.10) filesystem rights; ABI 4 (6.7) network; ABI 6
// (6.12) scopes.
constexpr uint64_t kFsTruncate = 1ULL << 14;
constexpr uint64_t kFsIoctlDev = 1ULL << 15;
constexpr uint64_t kNetBindTcp = 1ULL << 0;
constexpr uint64_t kNetConnectTcp = 1ULL << 1;
constexpr uint64_t kScopeAbstractUnix = 1ULL << 0;
constexpr uint64_t kScopeSignal = 1ULL << 1;

// struct landlock_ruleset_attr as of ABI 6; older kernels take a prefix.
struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};

struct PathBeneath {
  uint64_t allowed_access;
  int32_t parent_fd;
} __attribute__((packed));

constexpr uint64_t kFsRead =
    LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;

uint64_t HandledFs(int abi) {
  uint64_t fs =
      LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE |
      LANDLOCK_ACCESS_FS_READ_DIR | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |
      LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
      LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |
      LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (abi >= 2) fs |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) fs |= kFsTruncate;
  if (abi >= 5) fs |= kFsIoctlDev;
  return fs;
}

// Rights that make sense on a path: directories get everything asked for,
// files only the file rights.
uint64_t ForPath(uint64_t wanted, const struct stat& st) {
  if (S_ISDIR(st.st_mode)) return wanted;
  return wanted & (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE |
                   LANDLOCK_ACCESS_FS_READ_FILE | kFsTruncate | kFsIoctlDev);
}

}  // namespace

int LandlockAbi() {
  long abi = syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return abi < 0 ? 0 : static_cast<int>(abi);
}

Layer ApplyLandlock(const LandlockRules& rules) {
  const int abi = LandlockAbi();
  if (abi < 1) {
    return {"landlock", false,
            fmt::format("the kernel has no Landlock ({})", abi == 0 ? std::strerror(errno) : "?")};
  }
  RulesetAttr attr{};
  attr.handled_access_fs = HandledFs(abi);
  size_t attr_size = sizeof(uint64_t);
  std::string net = "no TCP rules (ABI < 4)";
  std::string scopes = "no scopes (ABI < 6)";
  if (abi >= 4 && !rules.allow_tcp) {
    attr.handled_access_net = kNetBindTcp | kNetConnectTcp;  // and no rule grants any port
    attr_size = 2 * sizeof(uint64_t);
    net = "no TCP bind or connect";
  } else if (abi >= 4) {
    attr_size = 2 * sizeof(uint64_t);
    net = "TCP allowed (NCCL)";
  }
  if (abi >= 6) {
    attr.scoped = kScopeSignal | (rules.allow_abstract_unix ? 0 : kScopeAbstractUnix);
    attr_size = sizeof(RulesetAttr);
    scopes =
        rules.allow_abstract_unix ? "no signals outside" : "no signals or abstract sockets outside";
  }
  int ruleset = static_cast<int>(syscall(SYS_landlock_create_ruleset, &attr, attr_size, 0));
  if (ruleset < 0) {
    return {"landlock", false, fmt::format("landlock_create_ruleset: {}", std::strerror(errno))};
  }
  const uint64_t write = attr.handled_access_fs & ~(LANDLOCK_ACCESS_FS_REMOVE_DIR);
  int paths = 0;
  auto add = [&](const std::string& path, uint64_t wanted) {
    int fd = open(path.c_str(), O_PATH | O_CLOEXEC);
    if (fd < 0) return;  // absent paths are simply not granted
    struct stat st {};
    if (fstat(fd, &st) == 0) {
      PathBeneath pb{ForPath(wanted & attr.handled_access_fs, st), fd};
      if (pb.allowed_access != 0 &&
          syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) == 0) {
        ++paths;
      }
    }
    close(fd);
  };
  for (const std::string& p : rules.read_paths) add(p, kFsRead);
  for (const std::string& p : rules.write_paths) add(p, write);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      syscall(SYS_landlock_restrict_self, ruleset, 0) != 0) {
    int err = errno;
    close(ruleset);
    return {"landlock", false, fmt::format("landlock_restrict_self: {}", std::strerror(err))};
  }
  close(ruleset);
  return {"landlock", true,
          fmt::format("ABI {}: {} paths granted (read-only except {} device/scratch paths); {}; {}",
                      abi, paths, rules.write_paths.size(), net, scopes)};
}

}  // namespace kforge::sandbox
