// The harness's own GPU work: generating inputs (the same bits as the host
// generator), poisoning outputs, checking outputs against expected values with
// a tolerance, and comparing bytes. All of it runs in the trusted harness
// worker, on its own stream; none of it is ever timed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kforge/core/status.h"
#include "task/input_gen.h"

namespace kforge::worker {

// Fills `numel` elements of `dst` (device memory) from `gen`, then makes its
// rows distinct where gen.distinct_len says so (gen::MakeRowDistinct).
Status LaunchGenerate(void* dst, const eval::gen::InputGen& gen, uint64_t numel, cudaStream_t s);

// Writes the 32-bit `pattern` over `bytes` bytes (bytes need not be a multiple of 4).
Status LaunchPoison(void* dst, size_t bytes, uint32_t pattern, cudaStream_t s);

// What a device-side check found; filled by LaunchCompare / LaunchBytesDiffer.
struct DeviceCheck {
  unsigned long long bad;        // elements outside tolerance (or differing words)
  unsigned long long first_bad;  // the smallest such index (UINT64_MAX if none)
  double sq_diff;                // LaunchCompare: sum of (got - expected)^2 over finite pairs
  double sq_expected;            // and of expected^2 over the same pairs
};

// Counts the elements of `got` (dtype) outside atol + rtol * |expected|, where
// both are finite; the same rule as eval::CompareOutput. Also sums the squared
// differences and squared expected values of the finite pairs (the relative
// RMS of eval::CompareOutput). `result` is device memory the caller set to
// {0, UINT64_MAX, 0, 0}.
Status LaunchCompare(const void* got, const void* expected, int dtype, uint64_t numel, double atol,
                     double rtol, DeviceCheck* result, cudaStream_t s);

// Counts the 8-byte words (and the tail bytes) in which a and b differ.
Status LaunchBytesDiffer(const void* a, const void* b, size_t bytes, DeviceCheck* result,
                         cudaStream_t s);

// Reads `bytes` of `buf` (a multiple of 16, device memory) through L2, so
// that whatever the harness wrote before (a call's staged inputs and poisoned
// outputs) is written back and evicted: a timed call starts with an L2 that
// holds none of its data, whichever order its inputs were made in
// (docs/methodology.md, "Candidate"). `sink` is 4 bytes of device memory the
// kernel writes only on a value that never occurs.
Status LaunchL2Flush(const void* buf, size_t bytes, uint32_t* sink, cudaStream_t s);

// An empty kernel: the calibration call of the timing path.
Status LaunchNull(cudaStream_t s);

// The median time of one flag round trip between GPU `a` and GPU `b` (the
// same GPU: two blocks of one kernel), in microseconds: one side stores a
// fresh value into the other's flag and waits for its echo, `rounds` times,
// timed on the device's global timer. Peer access is enabled where a != b
// (kInvalidInput when the pair has none). A round trip that never completes
// within ~1 s is kInternal, never a hang. The latency term of the floor
// (docs/methodology.md, "The floor").
Status MeasureFlagRoundTrip(int a, int b, int rounds, double* median_us);

}  // namespace kforge::worker
