// Locating nvcc and the directories a kernel's libraries are loaded from.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::eval {

// explicit_path when given (it must exist), else <cuda_home>/bin/nvcc when
// cuda_home is non-empty, else each of `defaults`, else nvcc in PATH.
// kNotFound names every place it looked.
Result<std::filesystem::path> FindNvcc(const std::filesystem::path& explicit_path,
                                       const std::string& cuda_home,
                                       const std::vector<std::filesystem::path>& defaults);

// The standard nvcc locations: /usr/local/cuda/bin/nvcc and the toolkit kforge was built with.
std::vector<std::filesystem::path> DefaultNvccLocations();

// Directories the dynamic loader searches for a kernel's DT_NEEDED libraries,
// in order: LD_LIBRARY_PATH, the CUDA toolkit next to `nvcc` (lib64, targets/*/lib),
// /etc/ld.so.conf (with its includes), then the system defaults.
std::vector<std::filesystem::path> LibrarySearchDirs(const std::filesystem::path& nvcc);

}  // namespace kforge::eval
