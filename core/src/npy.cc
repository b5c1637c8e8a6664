#include "kforge/core/npy.h"

#include <fstream>

namespace kforge {

std::string NpyHeader(std::string_view descr, std::span<const int64_t> shape) {
  std::string dict = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (";
  for (size_t k = 0; k < shape.size(); ++k) {
    dict += std::to_string(shape[k]);
    if (shape.size() == 1 || k + 1 < shape.size()) dict += ",";
    if (k + 1 < shape.size()) dict += " ";
  }
  dict += "), }";
  // magic (6) + version (2) + length (2) + dict + padding + '\n': a multiple of 64.
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string header("\x93NUMPY\x01\x00", 8);
  header += static_cast<char>(dict.size() & 0xFF);
  header += static_cast<char>((dict.size() >> 8) & 0xFF);
  return header + dict;
}

Status WriteNpy(const std::filesystem::path& path, std::string_view descr,
                std::span<const int64_t> shape, const void* data, size_t bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Error(ErrorKind::kIo, "cannot write " + path.string());
  const std::string header = NpyHeader(descr, shape);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  out.close();
  if (!out) return Error(ErrorKind::kIo, "writing " + path.string() + " failed");
  return Status::Ok();
}

}  // namespace kforge
