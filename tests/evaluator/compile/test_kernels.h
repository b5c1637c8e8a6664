// Kernels compiled once per test process with real nvcc and shared by the
// suites (each nvcc run costs seconds). The cache directory lives in the build
// tree and is emptied once per ctest run (a ctest fixture), so the first test
// process compiles and the others hit the cache.
#pragma once

#include <string>

#include "kforge/evaluator/compile.h"

namespace kforge::eval::testing {

// A kernel to the ABI: copies input 0 to output 0 (kf_setup/kf_run/kf_teardown).
extern const char* const kGoodKernel;
// Line 4 uses an undeclared identifier; line 6 misses a ';'.
extern const char* const kSyntaxErrorKernel;
// Compiles and links, but defines only kf_setup.
extern const char* const kNoRunKernel;
// Calls an extern "C" function that no library defines.
extern const char* const kLinkErrorKernel;
// Calls ncclAllReduce (linked with -lnccl).
extern const char* const kNcclKernel;
// Calls dlopen and uses multimem PTX in inline asm.
extern const char* const kBadActorKernel;
// Calls kf_all_reduce, which only the worker defines.
extern const char* const kCollectivesKernel;

struct CompiledKernels {
  CompileResult good, syntax_error, no_run, link_error, nccl, bad_actor, collectives;
};

// True when the real-nvcc cases can run (nvcc found).
bool HaveNvcc();
// The compiler the shared kernels were built with (cache in the build tree).
Compiler& SharedCompiler();
// Compiles all of the above once per process, in parallel (CompileAll).
const CompiledKernels& Kernels();
// The job Kernels() used for a source; display name "candidate.cu".
CompileJob JobFor(const char* source);

}  // namespace kforge::eval::testing
