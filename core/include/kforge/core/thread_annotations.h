// Clang's thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html),
// as LevelDB's port/thread_annotations.h spells them. Under clang with
// -Wthread-safety the compiler checks that every GUARDED_BY member is touched
// only with its mutex held (scripts/thread-safety.sh runs it in CI); under
// other compilers the macros are empty.
//
//   Mutex mu_;
//   int count_ GUARDED_BY(mu_);
//   void BumpLocked() REQUIRES(mu_);
#pragma once

#if defined(__clang__)
#define KFORGE_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define KFORGE_THREAD_ANNOTATION(x)
#endif

// A type that is a lock (kforge::Mutex).
#define CAPABILITY(x) KFORGE_THREAD_ANNOTATION(capability(x))
// An RAII type that holds a lock for its scope (kforge::MutexLock).
#define SCOPED_CAPABILITY KFORGE_THREAD_ANNOTATION(scoped_lockable)

// The member may be read or written only with `x` held.
#define GUARDED_BY(x) KFORGE_THREAD_ANNOTATION(guarded_by(x))
// What the pointer (or smart pointer) points to may be used only with `x` held.
#define PT_GUARDED_BY(x) KFORGE_THREAD_ANNOTATION(pt_guarded_by(x))

// The caller must hold (REQUIRES) or must not hold (EXCLUDES) the locks.
#define REQUIRES(...) KFORGE_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) KFORGE_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

// The function takes (ACQUIRE), gives back (RELEASE) or may take (TRY_ACQUIRE,
// holding the lock when it returns `ok`) the locks; with no argument, `this`.
#define ACQUIRE(...) KFORGE_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) KFORGE_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) KFORGE_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))

// Tells the analysis the lock is held here (checked by nothing at run time).
#define ASSERT_CAPABILITY(x) KFORGE_THREAD_ANNOTATION(assert_capability(x))
// The function returns a reference to the lock `x`.
#define RETURN_CAPABILITY(x) KFORGE_THREAD_ANNOTATION(lock_returned(x))

// Leaves the function out of the analysis; say why beside it.
#define NO_THREAD_SAFETY_ANALYSIS KFORGE_THREAD_ANNOTATION(no_thread_safety_analysis)
