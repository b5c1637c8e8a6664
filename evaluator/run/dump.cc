#include "run/dump.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "kforge/core/fs.h"
#include "kforge/core/npy.h"

namespace kforge::eval {

using nlohmann::json;
namespace fs = std::filesystem;

std::string NpyDescr(Dtype dt) {
  switch (dt) {
    case Dtype::kF64:
      return "<f8";
    case Dtype::kF32:
      return "<f4";
    case Dtype::kF16:
      return "<f2";
    case Dtype::kBF16:
      return "<u2";
    case Dtype::kFp8E4M3:
    case Dtype::kFp8E5M2:
    case Dtype::kU8:
      return "|u1";
    case Dtype::kI64:
      return "<i8";
    case Dtype::kI32:
      return "<i4";
    case Dtype::kI8:
      return "|i1";
    case Dtype::kBool:
      return "|b1";
  }
  return "|u1";
}

namespace {

Status Write(const fs::path& dir, const fs::path& rel, const std::string& descr,
             const std::vector<int64_t>& shape, const void* data, size_t bytes, json entry,
             json* files) {
  std::error_code ec;
  fs::create_directories((dir / rel).parent_path(), ec);
  if (ec) return Error(ErrorKind::kIo, "cannot create " + (dir / rel).parent_path().string());
  KF_RETURN_IF_ERROR(WriteNpy(dir / rel, descr, shape, data, bytes));
  entry["path"] = rel.string();
  entry["shape"] = shape;
  entry["npy_dtype"] = descr;
  files->push_back(std::move(entry));
  return Status::Ok();
}

}  // namespace

Status DumpTrial(const fs::path& dir, const TrialTensors& t) {
  const Problem& p = *t.problem;
  json manifest;
  const fs::path manifest_path = dir / "manifest.json";
  if (fs::exists(manifest_path)) {
    KF_ASSIGN_OR_RETURN(std::string text, ReadFile(manifest_path));
    manifest = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!manifest.is_object() || !manifest.contains("files")) {
      return Error(
          ErrorKind::kInvalidInput,
          manifest_path.string() + " is not a kforge dump manifest; use an empty --dump directory");
    }
  } else {
    manifest = {{"schema", "kforge.dump/1"},
                {"task", t.task},
                {"dtype", std::string(DtypeName(t.dtype))},
                {"world", p.world},
                {"files", json::array()}};
  }
  manifest["sizes"][t.size] = {{"seed", t.seed}, {"vars", p.vars}};
  json& files = manifest["files"];
  for (int r = 0; r < p.world; ++r) {
    const fs::path rank_dir = fs::path(t.size) / ("rank" + std::to_string(r));
    // A tensor as the kernel saw or wrote it, in its own dtype.
    auto raw = [&](const ConcreteTensor& c, const std::string& role, const auto& bytes) {
      const size_t n =
          std::min(bytes.size(), static_cast<size_t>(c.NumelOf(r)) * DtypeSize(c.dtype));
      return Write(dir, rank_dir / (role + "." + c.name + ".npy"), NpyDescr(c.dtype), c.ShapeOf(r),
                   bytes.data(), n,
                   {{"size", t.size},
                    {"rank", r},
                    {"tensor", c.name},
                    {"role", role},
                    {"dtype", std::string(DtypeName(c.dtype))}},
                   &files);
    };
    for (size_t i = 0; i < p.inputs.size(); ++i)
      KF_RETURN_IF_ERROR(raw(p.inputs[i], "input", (*t.inputs)[r][i]));
    for (size_t o = 0; o < p.outputs.size(); ++o) {
      const ConcreteTensor& c = p.outputs[o];
      KF_RETURN_IF_ERROR(raw(c, "output", (*t.outputs)[r][o]));
      const OracleTensor& e = t.expected->outputs[r][o];
      KF_RETURN_IF_ERROR(Write(dir, rank_dir / ("expected." + c.name + ".npy"), "<f8", e.shape,
                               e.data.data(), e.data.size() * sizeof(double),
                               {{"size", t.size},
                                {"rank", r},
                                {"tensor", c.name},
                                {"role", "expected"},
                                {"dtype", "f64"},
                                {"checked", c.only_rank < 0 || c.only_rank == r},
                                {"atol", c.tolerance.atol},
                                {"rtol", c.tolerance.rtol}},
                               &files));
    }
  }
  return WriteFileAtomic(manifest_path, manifest.dump(2) + "\n");
}

}  // namespace kforge::eval
