// NumPy's .npy format (version 1.0), written: a magic string, a header that
// is a Python dict literal (dtype, order, shape) padded to 64 bytes, then the
// raw little-endian elements in C order. numpy.load and torch read it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "kforge/core/status.h"

namespace kforge {

// The header of an array of `descr` (e.g. "<f4", "|u1") and `shape`.
std::string NpyHeader(std::string_view descr, std::span<const int64_t> shape);

// Writes header and `bytes` of data; `bytes` must be the product of the shape
// times the element size the caller's descr names.
Status WriteNpy(const std::filesystem::path& path, std::string_view descr,
                std::span<const int64_t> shape, const void* data, size_t bytes);

}  // namespace kforge
