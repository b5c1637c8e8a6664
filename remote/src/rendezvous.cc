#include "kforge/remote/rendezvous.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <system_error>

#include "kforge/core/fs.h"

namespace kforge::remote {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kSchema = "kforge.eval_server_registration/1";

}  // namespace

Status WriteRegistration(const fs::path& file, const Registration& r) {
  json j = {{"schema", kSchema},
            {"url", r.url},
            {"host", r.host},
            {"pid", r.pid},
            {"slots", {{"gpu", r.gpu_slots}, {"compile", r.compile_slots}}},
            {"slurm_job", r.slurm_job},
            {"registered_at", r.registered_at}};
  return WriteFileAtomic(file, j.dump(2) + "\n");
}

Result<Registration> ReadRegistration(const fs::path& file) {
  KF_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("schema", "") != kSchema)
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{}: not a {} document", file.string(), kSchema));
  Registration r;
  try {
    r.url = j.at("url").get<std::string>();
    r.host = j.value("host", "");
    r.pid = j.value("pid", 0);
    r.gpu_slots = j.at("slots").value("gpu", 0);
    r.compile_slots = j.at("slots").value("compile", 0);
    r.slurm_job = j.value("slurm_job", "");
    r.registered_at = j.value("registered_at", 0.0);
  } catch (const json::exception& e) {
    return Error(ErrorKind::kInvalidInput, fmt::format("{}: {}", file.string(), e.what()));
  }
  if (r.url.rfind("http://", 0) != 0 && r.url.rfind("https://", 0) != 0)
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{}: url '{}' is not http(s)://", file.string(), r.url));
  r.origin = file;
  return r;
}

std::vector<Registration> ReadRegistrations(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".json" && it->is_regular_file()) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  std::vector<Registration> out;
  for (const auto& f : files) {
    auto r = ReadRegistration(f);
    if (r.ok()) out.push_back(std::move(*r));
  }
  return out;
}

}  // namespace kforge::remote
