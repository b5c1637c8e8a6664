/* The kernel ABI's version and fixed limits (kforge/kernel.h includes this).
 * Plain C with no CUDA headers, so host code (the task loader) shares them. */
#ifndef KFORGE_ABI_LIMITS_H_
#define KFORGE_ABI_LIMITS_H_

#define KF_ABI_VERSION 2
#define KF_MAX_RANKS 16   /* world size */
#define KF_MAX_DIMS 8     /* tensor rank */
#define KF_MAX_TENSORS 32 /* inputs, and separately outputs */
#define KF_MAX_PARAMS 32  /* scalar params */
#define KF_MAX_GROUPS 4   /* sub-communicators */

#endif /* KFORGE_ABI_LIMITS_H_ */
