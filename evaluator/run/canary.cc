#include "run/canary.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kforge::eval {

namespace fs = std::filesystem;

Result<std::unique_ptr<CanaryFile>> CanaryFile::Plant(std::string_view canary,
                                                      const fs::path& parent) {
  std::error_code ec;
  const fs::path base = parent.empty() ? fs::temp_directory_path(ec) : parent;
  if (ec) return Error(ErrorKind::kIo, "no temporary folder for the canary: " + ec.message());
  std::string templ = (base / "kforge-harness-XXXXXX").string();
  if (mkdtemp(templ.data()) == nullptr)  // mode 0700
    return Error(ErrorKind::kIo, fmt::format("mkdtemp {}: {}", templ, std::strerror(errno)));
  auto f = std::unique_ptr<CanaryFile>(new CanaryFile());
  f->dir_ = templ;
  f->file_ = f->dir_ / "canary";
  // Created 0600 before a byte is in it (WriteFileAtomic would leave the
  // umask's mode until a chmod).
  const int fd = open(f->file_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return Error(ErrorKind::kIo, fmt::format("{}: {}", f->file_.string(), std::strerror(errno)));
  const bool written =
      write(fd, canary.data(), canary.size()) == static_cast<ssize_t>(canary.size());
  close(fd);
  if (!written) return Error(ErrorKind::kIo, "writing " + f->file_.string());
  return f;
}

CanaryFile::~CanaryFile() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

CanaryFound CanaryInOutputs(const std::vector<std::string>& needles, const Problem& p,
                            const std::vector<std::vector<std::vector<char>>>& outputs, int trial) {
  for (size_t r = 0; r < outputs.size(); ++r) {
    for (size_t o = 0; o < outputs[r].size(); ++o) {
      const auto& bytes = outputs[r][o];
      auto s = FindCanary(std::string_view(bytes.data(), bytes.size()), needles);
      if (!s) continue;
      const std::string name = o < p.outputs.size() ? p.outputs[o].name : std::to_string(o);
      return {static_cast<int>(r), fmt::format("rank {}'s output '{}' {} (size {}, trial {})", r,
                                               name, s->Where(), p.size_label, trial)};
    }
  }
  return {};
}

CanaryFound CanaryInStream(int rank, const CanarySighting& sighting) {
  return {rank, fmt::format("rank {}'s stdout/stderr {}", rank, sighting.Where())};
}

CanaryFound CanaryInReports(std::string_view token,
                            const std::vector<std::pair<std::string, std::string>>& texts,
                            int rank) {
  if (token.empty()) return {};
  for (const auto& [field, text] : texts) {
    if (text.find(token) == std::string::npos) continue;
    return {rank, fmt::format("the evaluation's `{}`{}", field,
                              rank >= 0 ? fmt::format(" (rank {})", rank) : "")};
  }
  return {};
}

nlohmann::json CanaryFinding(const CanaryFound& found) {
  nlohmann::json f = {{"check", "canary"},
                      {"message",
                       "the evaluation's canary, a token only the harness held (in its "
                       "environment and a private file), came back from the candidate: in " +
                           found.where}};
  if (found.rank >= 0) f["rank"] = found.rank;
  return f;
}

nlohmann::json CanaryReport(const std::vector<std::string>& planted, const std::string& found) {
  nlohmann::json r = {{"planted", planted}};
  if (!found.empty()) r["found"] = found;
  return r;
}

}  // namespace kforge::eval
