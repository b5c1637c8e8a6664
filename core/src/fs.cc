#include "kforge/core/fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace kforge {
namespace fs = std::filesystem;

Result<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Error(errno == ENOENT ? ErrorKind::kNotFound : ErrorKind::kIo,
                 path.string() + ": " + std::strerror(errno));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Error(ErrorKind::kIo, path.string() + ": read failed");
  return ss.str();
}

Status MakeDirs(const fs::path& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return Error(ErrorKind::kIo, path.string() + ": " + ec.message());
  return Status::Ok();
}

namespace {

// The mode a new file gets from open(..., 0666). The umask is read from
// /proc/self/status (Linux 4.7+): umask(2) can only read it by setting it,
// which would let another thread create a file unmasked in between.
mode_t PublishedMode() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Umask:", 0) == 0) {
      return 0666 & ~static_cast<mode_t>(std::strtoul(line.c_str() + 6, nullptr, 8));
    }
  }
  const mode_t mask = umask(0);
  umask(mask);
  return 0666 & ~mask;
}

// `replace`: rename(2) over any file at `path`; else link(2), which fails
// when `path` exists, so the file is created whole or not at all.
Status WriteAtomic(const fs::path& path, std::string_view content, bool published,
                   bool replace = true) {
  if (path.has_parent_path()) KF_RETURN_IF_ERROR(MakeDirs(path.parent_path()));
  std::string tmpl = path.string() + ".tmp-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  int fd = mkstemp(buf.data());
  if (fd < 0) return Error(ErrorKind::kIo, path.string() + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      close(fd);
      unlink(buf.data());
      return Error(ErrorKind::kIo, path.string() + ": " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (published && fchmod(fd, PublishedMode()) != 0) {
    int err = errno;
    close(fd);
    unlink(buf.data());
    return Error(ErrorKind::kIo, path.string() + ": " + std::strerror(err));
  }
  fsync(fd);
  close(fd);
  if (!replace) {
    const int rc = link(buf.data(), path.c_str());
    const int err = errno;
    unlink(buf.data());
    if (rc == 0) return Status::Ok();
    if (err == EEXIST)
      return Error(ErrorKind::kInvalidInput, path.string() + " exists; not overwritten");
    return Error(ErrorKind::kIo, path.string() + ": " + std::strerror(err));
  }
  if (rename(buf.data(), path.c_str()) != 0) {
    int err = errno;
    unlink(buf.data());
    return Error(ErrorKind::kIo, path.string() + ": " + std::strerror(err));
  }
  return Status::Ok();
}

}  // namespace

Status WriteFileAtomic(const fs::path& path, std::string_view content) {
  return WriteAtomic(path, content, false);
}

Status WritePublishedFile(const fs::path& path, std::string_view content) {
  return WriteAtomic(path, content, true);
}

Status WriteNewPublishedFile(const fs::path& path, std::string_view content) {
  return WriteAtomic(path, content, true, /*replace=*/false);
}

fs::path DefaultCacheDir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "kforge";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "kforge";
  return fs::path("/tmp/kforge-cache");
}

fs::path InstalledDataDir() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  const fs::path share = (self.parent_path().parent_path() / "share" / "kforge").lexically_normal();
  return fs::is_directory(share, ec) ? share : fs::path();
}

fs::path DataPath(const fs::path& relative, const fs::path& source_root) {
  const fs::path installed = InstalledDataDir();
  std::error_code ec;
  if (!installed.empty() && fs::exists(installed / relative, ec)) return installed / relative;
  return source_root / relative;
}

Result<fs::path> MakeTempDir(std::string_view prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(tmp && *tmp ? tmp : "/tmp") + "/" + std::string(prefix) + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) return Error(ErrorKind::kIo, tmpl + ": " + std::strerror(errno));
  return fs::path(buf.data());
}

}  // namespace kforge
