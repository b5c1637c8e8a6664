#include "compile_cache.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "kforge/core/fs.h"
#include "kforge/core/hash.h"

namespace kforge::eval {
namespace fs = std::filesystem;
namespace {

constexpr const char* kRecordName = "record.json";
constexpr int kRecordVersion = 3;  // 2: the shared object's SHA-256; 3: resources

std::optional<Severity> SeverityFromName(const std::string& name) {
  for (Severity s : {Severity::kError, Severity::kWarning, Severity::kNote, Severity::kRemark}) {
    if (SeverityName(s) == name) return s;
  }
  return std::nullopt;
}

}  // namespace

namespace {

// A damaged, outdated or tampered entry is removed, so that the compile that
// follows the miss can publish a good one in its place.
std::optional<CacheRecord> Discard(const fs::path& entry_dir) {
  std::error_code ec;
  fs::remove_all(entry_dir, ec);
  return std::nullopt;
}

}  // namespace

std::optional<CacheRecord> LoadCacheRecord(const fs::path& entry_dir, uint64_t max_object_bytes) {
  Result<std::string> text = ReadFile(entry_dir / kRecordName);
  if (!text.ok()) return std::nullopt;
  // The record is our own file, but a damaged one must be a miss, not a crash.
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("version", 0) != kRecordVersion) return Discard(entry_dir);
  try {
    CacheRecord r;
    r.ok = j.at("ok").get<bool>();
    r.message = j.at("message").get<std::string>();
    r.log = j.at("log").get<std::string>();
    r.seconds = j.at("seconds").get<double>();
    for (const auto& item : j.at("diagnostics")) {
      Diagnostic d;
      d.file = item.at("file").get<std::string>();
      d.line = item.at("line").get<int>();
      d.column = item.at("column").get<int>();
      std::optional<Severity> s = SeverityFromName(item.at("severity").get<std::string>());
      if (!s) return std::nullopt;
      d.severity = *s;
      d.message = item.at("message").get<std::string>();
      d.context = item.value("context", "");
      r.diagnostics.push_back(std::move(d));
    }
    for (const auto& item : j.at("resources")) {
      std::optional<KernelResources> k = KernelResources::FromJson(item);
      if (!k) return Discard(entry_dir);
      r.resources.push_back(std::move(*k));
    }
    if (r.ok) {
      // Verified on every hit: an entry whose object changed since it was
      // published (a kernel that wrote into the cache) is never loaded.
      std::error_code ec;
      if (fs::file_size(entry_dir / kSharedObjectName, ec) > max_object_bytes || ec)
        return Discard(entry_dir);
      Result<std::string> so = ReadFile(entry_dir / kSharedObjectName);
      if (!so.ok() || Sha256Hex(*so) != j.at("so_sha256").get<std::string>())
        return Discard(entry_dir);
    }
    return r;
  } catch (const nlohmann::json::exception&) {
    return Discard(entry_dir);
  }
}

Status PublishCacheEntry(const fs::path& staging, const fs::path& entry_dir,
                         const CacheRecord& record) {
  nlohmann::json diagnostics = nlohmann::json::array();
  for (const Diagnostic& d : record.diagnostics) {
    nlohmann::json item = d.ToJson();
    item["context"] = d.context;
    diagnostics.push_back(std::move(item));
  }
  nlohmann::json resources = nlohmann::json::array();
  for (const KernelResources& k : record.resources) resources.push_back(k.ToJson());
  nlohmann::json j = {{"version", kRecordVersion}, {"ok", record.ok},
                      {"message", record.message}, {"log", record.log},
                      {"seconds", record.seconds}, {"diagnostics", diagnostics},
                      {"resources", resources}};
  if (record.ok) {
    KF_ASSIGN_OR_RETURN(std::string so, ReadFile(staging / kSharedObjectName));
    j["so_sha256"] = Sha256Hex(so);
  }
  // dump() with "replace" so that odd bytes in a compiler log never throw.
  KF_RETURN_IF_ERROR(WriteFileAtomic(
      staging / kRecordName, j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace)));
  if (std::rename(staging.c_str(), entry_dir.c_str()) == 0) return Status::Ok();
  int err = errno;
  std::error_code ec;
  fs::remove_all(staging, ec);
  if ((err == EEXIST || err == ENOTEMPTY) && fs::exists(entry_dir / kRecordName))
    return Status::Ok();
  return Error(ErrorKind::kIo, "cannot publish " + entry_dir.string() + ": " + std::strerror(err));
}

}  // namespace kforge::eval
