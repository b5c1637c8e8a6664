#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang, ASan and UBSan, and runs each
# for a bounded time on a seed corpus drawn from the tree (tasks, kernels) and
# the recorded provider responses.
#
#   scripts/fuzz.sh [seconds per target, default 20] [target ...]
#
# BUILD (default build-fuzz) is the build folder; the corpus each run grows is
# kept in $BUILD/fuzz-corpus so later runs start from it. A crash, a leak, a
# sanitizer report or an input slower than 10 s fails the script and leaves the
# input in $BUILD/fuzz-artifacts/; replay it with `$BUILD/fuzz/<target> <file>`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
seconds=${1:-20}
shift || true
build=${BUILD:-build-fuzz}
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(extract_fuzzer provider_response_fuzzer task_toml_fuzzer wire_fuzzer kernel_source_fuzzer)
fi

cxx=${CLANGXX:-clang++}
if ! command -v "$cxx" >/dev/null; then
  echo "fuzz: $cxx not found (apt-get install clang libclang-rt-dev)" >&2
  exit 2
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
  >"$probe/probe.cc"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/probe.cc" -o "$probe/probe" 2>"$probe/err"; then
  echo "fuzz: $cxx cannot link -fsanitize=fuzzer (apt-get install libclang-rt-dev):" >&2
  cat "$probe/err" >&2
  exit 2
fi

launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="$cxx" -DKFORGE_FUZZ=ON -DKFORGE_BUILD_TESTS=OFF "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"

# Seeds: what each parser meets in practice.
seeds="$build/fuzz-seeds"
rm -rf "$seeds"
mkdir -p "$seeds"/{extract_fuzzer,provider_response_fuzzer,task_toml_fuzzer,wire_fuzzer,kernel_source_fuzzer}
cp fuzz/seeds/extract/* "$seeds/extract_fuzzer/"
cp fuzz/seeds/wire/* "$seeds/wire_fuzzer/"
cp fuzz/seeds/compiler_output/* "$seeds/kernel_source_fuzzer/"
n=0
for f in tasks/*/task.toml; do cp "$f" "$seeds/task_toml_fuzzer/$((n++)).toml"; done
for f in tasks/*/reference.cu tasks/*/solutions/*.cu; do
  [[ -f "$f" ]] && cp "$f" "$seeds/kernel_source_fuzzer/$((n++)).cu"
  [[ -f "$f" ]] && printf '```cuda\n%s\n```\n' "$(cat "$f")" >"$seeds/extract_fuzzer/$((n++)).md"
done
fixtures=${KFORGE_FIXTURES_DIR:-$root/../shared/provider-fixtures}
if [[ -d "$fixtures" ]]; then
  find "$fixtures" -maxdepth 1 -type f ! -name '*.md' -exec cp {} "$seeds/provider_response_fuzzer/" \;
else
  echo "fuzz: no provider fixtures at $fixtures (set KFORGE_FIXTURES_DIR); seeding from fuzz/seeds only" >&2
fi
cp fuzz/seeds/provider/* "$seeds/provider_response_fuzzer/"

mkdir -p "$build/fuzz-artifacts"
failed=()
for t in "${targets[@]}"; do
  corpus="$build/fuzz-corpus/$t"
  mkdir -p "$corpus"
  echo "fuzz: $t for ${seconds}s"
  if ! "$build/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/$t-" "$corpus" "$seeds/$t" \
    >"$build/fuzz-artifacts/$t.log" 2>&1; then
    failed+=("$t")
    tail -n 40 "$build/fuzz-artifacts/$t.log" >&2
  else
    grep -E '^stat::number_of_executed_units|^stat::new_units_added' "$build/fuzz-artifacts/$t.log" |
      sed "s/^/fuzz: $t: /"
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]} (inputs in $build/fuzz-artifacts/)" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, no crash"
