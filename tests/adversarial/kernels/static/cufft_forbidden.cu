// Exploit: 001_allreduce does not allow cuFFT; plan a transform with it anyway.
// Expected: policy_violation
// ("includes cufft.h: this task does not allow cuFFT").
#include <cufft.h>

#include "kforge/kernel.h"

static cufftHandle plan;

extern "C" int kf_setup(kf_ctx*) { return cufftPlan1d(&plan, 64, CUFFT_C2C, 1) == CUFFT_SUCCESS ? 0 : 1; }

extern "C" int kf_run(kf_ctx*) { return 0; }
