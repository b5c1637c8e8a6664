#!/usr/bin/env bash
# Prepares build-gpu/ for scripts/gpu-check.sh on a GPU machine that cannot
# build kforge itself: builds the needed targets in build/ here, then copies
# that tree without objects, static archives or debug info, plus the shared
# libraries a bare GPU machine may lack (build-gpu/deps).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKFORGE_BUILD_TESTS=ON >/dev/null
# The test binaries with ctest label gpu, and the bench that needs a GPU.
GPU_BINS=(tests/evaluator/run/gpu_eval_test tests/evaluator/worker/input_gen_gpu_test
  tests/evaluator/worker/profiler_gpu_test tests/remote/remote_bench tests/evaluator/worker/event_loop)
cmake --build build -j "$(nproc)" --target kforge kforge-worker kforge-jail gpu_eval_test \
  input_gen_gpu_test profiler_gpu_test remote_bench event_loop
rm -rf build-gpu
mkdir -p build-gpu
(cd build && find . \( -name '*.o' -o -name '*.a' -o -name '*.d' -o -name 'CMakeFiles' -prune \) -o -type f -print) |
  grep -v '^\./CMakeFiles' | while read -r f; do
    # Of the test binaries only the GPU ones travel (the carry is size-limited).
    if [[ "$f" == ./tests/* && -x "build/$f" && ! " ${GPU_BINS[*]} " == *" ${f#./} "* ]]; then
      continue
    fi
    mkdir -p "build-gpu/$(dirname "$f")"
    cp -p "build/$f" "build-gpu/$f"
  done
for bin in build-gpu/bin/kforge build-gpu/bin/kforge-worker "${GPU_BINS[@]/#/build-gpu/}"; do
  [[ -f "$bin" ]] && strip --strip-debug "$bin"
done
mkdir -p build-gpu/deps
# Only what kforge's own binaries load. Kernels are compiled and linked on the
# GPU machine against its toolkit, so the libraries a task may link (cuBLAS,
# cuFFT, cuDNN: hundreds of MB each, over the carry limit) come from there;
# gpu-check.sh records which it has, and a task needing a missing one fails
# with a harness error naming it (docs/tasks.md, "Libraries").
for bin in build/bin/kforge build/bin/kforge-worker "${GPU_BINS[@]/#/build/}"; do
  ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libgcc_s.so*|libstdc++.so*|libcuda.so*|libcudart.so*|libnccl.so*) ;;
      *) cp -L "$lib" build-gpu/deps/ ;;
    esac
  done
done
du -sh build-gpu
