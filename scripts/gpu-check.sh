#!/usr/bin/env bash
# The GPU check: build (or use the carried build-gpu/ from scripts/gpu-bundle.sh),
# run the gpu-labelled tests, evaluate every task's reference and every
# hand-written solution, and print a short table. Full logs and JSON go to
# $OUT (or ./gpu-check-out). SKIP_CTEST=1 / SKIP_TABLE=1 skip a part;
# WORLDS="2 4", BENCH_SIZE=1MiB and TASKS="013_* 016_*" (globs over task
# folders) narrow the table. `gpu-check.sh PART` runs one part of the gpu
# tests and stops, each sized for one device call (a few minutes on an H100):
#   core     the harness tests (wrong, hung and crashing kernels, exploits, timing)
#   profile  the profiler's tests (CUPTI; 152 s of one H100 call once, so a part of their own)
#   nccl-w1  every reference once through real NCCL at W = 1 (about 3 minutes on an H100)
#   tasks-1  every reference and solution of tasks 001-019 at W = 2 and 4
#   tasks-2  tasks 020-039, tasks-3 040-054, tasks-4 055-069, tasks-5 070-099,
#            tasks-6 100-119, tasks-7 120-199 (beyond PKB)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/gpu-check-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0   # NVLink multicast stays off on shared machines
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"

BUILD=${BUILD:-}
if [[ -z "$BUILD" ]]; then
  if [[ -x build-gpu/bin/kforge && -x build-gpu/bin/kforge-worker ]]; then BUILD=build-gpu; else BUILD=build; fi
fi
if [[ "$BUILD" == build-gpu ]]; then
  # build-gpu/ is build/ made on another machine: its absolute paths name that
  # checkout's build/, so make those paths lead here.
  baked=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' build-gpu/CMakeCache.txt)
  [[ -e build ]] || ln -s build-gpu build
  if [[ -n "$baked" && "$baked" != "$ROOT" && ! -e "$baked" ]]; then
    mkdir -p "$(dirname "$baked")" && ln -s "$ROOT" "$baked"
  fi
  BUILD=build
  export LD_LIBRARY_PATH="$ROOT/build-gpu/deps:$LD_LIBRARY_PATH"
else
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && \
    cmake --build "$BUILD" -j "$(nproc)" --target kforge kforge-worker kforge-jail gpu_eval_test || exit 1
fi
KFORGE="$ROOT/$BUILD/bin/kforge"
nvidia-smi --query-gpu=index,name,clocks.sm,temperature.gpu --format=csv,noheader 2>/dev/null | tee "$OUT/gpus.txt"
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
# The task libraries the toolkit here has (tasks 059/060 need cuFFT; cuDNN is not guaranteed).
for lib in cublas cufft cudnn; do
  if compgen -G "/usr/local/cuda/lib64/lib$lib.so" >/dev/null; then echo "lib$lib: yes"; else echo "lib$lib: MISSING"; fi
done | tee "$OUT/libraries.txt"

PART=${1:-}
if [[ -n "$PART" ]]; then
  case "$PART" in
    core) select=(-E "EveryTask|ThroughNcclAtW1|Profile") ;;
    profile) select=(-R "Profile") ;;
    nccl-w1) select=(-R "ThroughNcclAtW1") ;;
    tasks-1) select=(-R "EveryTask.*t0[01][0-9]_") ;;
    tasks-2) select=(-R "EveryTask.*t0[23][0-9]_") ;;
    tasks-3) select=(-R "EveryTask.*t0(4[0-9]|5[0-4])_") ;;
    tasks-4) select=(-R "EveryTask.*t0(5[5-9]|6[0-9])_") ;;
    tasks-5) select=(-R "EveryTask.*t0[789][0-9]_") ;;
    tasks-6) select=(-R "EveryTask.*t1[01][0-9]_") ;;
    tasks-7) select=(-R "EveryTask.*t1[2-9][0-9]_") ;;
    *) echo "gpu-check: unknown part '$PART' (core, profile, nccl-w1, tasks-1 .. tasks-7)" >&2; exit 64 ;;
  esac
  echo "== ctest -L gpu, part $PART"
  # The JUnit file keeps every test's own output, passed ones too (the exploit
  # table, the timing lines), which the console log prints only on failure.
  (cd "$BUILD" && ctest -L gpu "${select[@]}" --output-on-failure --timeout 600 \
     --output-junit "$OUT/ctest-gpu-$PART.xml") 2>&1 |
    tee "$OUT/ctest-gpu-$PART.log" | tail -n 25
  exit "${PIPESTATUS[0]}"
fi

if [[ -z "${SKIP_CTEST:-}" ]]; then
  echo "== ctest -L gpu"
  (cd "$BUILD" && ctest -L gpu --output-on-failure --timeout 1200 --output-junit "$OUT/ctest-gpu.xml") 2>&1 | tee "$OUT/ctest-gpu.log" | tail -n 25
fi
[[ -n "${SKIP_TABLE:-}" ]] && exit 0

echo "== evaluating every task's reference and solutions"
worlds=${WORLDS:-}
if [[ -z "$worlds" ]]; then
  if (( GPUS >= 8 )); then worlds="2 4 8"; elif (( GPUS >= 4 )); then worlds="2 4"; else worlds="2 4"; fi
fi
rows=()
for dir in tasks/[0-9]*_*/; do
  key=$(basename "$dir")
  if [[ -n "${TASKS:-}" ]]; then
    keep=""
    for pattern in $TASKS; do [[ "$key" == $pattern ]] && keep=1; done
    [[ -n "$keep" ]] || continue
  fi
  for kernel in "$dir/reference.cu" "$dir"/solutions/*.cu; do
    [[ -f "$kernel" ]] || continue
    for w in $worlds; do
      name="${key}__$(basename "$kernel" .cu)__w$w"
      trusted=(); [[ "$(basename "$kernel")" == reference.cu ]] && trusted=(--trusted)
      "$KFORGE" eval --task "$key" --kernel "$kernel" --world "$w" --trials "${TRIALS:-3}" "${trusted[@]}" \
        ${BENCH_SIZE:+--bench-size "$BENCH_SIZE"} --json "$OUT/$name.json" > "$OUT/$name.txt" 2>&1
      rows+=("$OUT/$name.json")
    done
  done
done
python3 - "${rows[@]}" <<'PY' | tee "$OUT/table.md"
import json, sys
print(f"| {'task':<20} | {'kernel':<10} | W | {'status':<13} | emu | size   | base_us   | cand_us   | speedup | busbw GB/s | roof |")
print("|" + "|".join(["-" * 22, "-" * 12, "---", "-" * 15, "-----", "--------", "-" * 11, "-" * 11, "-" * 9, "-" * 12, "------"]) + "|")
for path in sys.argv[1:]:
    try:
        d = json.load(open(path))
    except Exception as e:
        print(f"| {path} | unreadable: {e} |"); continue
    kern = d.get("kernel", {}).get("path", "?").replace(".cu", "")
    base = [d.get("task", "?"), kern, str(d.get("world", "?")), d.get("status", "?"), "yes" if d.get("emulated") else "no"]
    timing = d.get("timing") or [None]
    for t in timing:
        if t is None:
            print(f"| {base[0]:<20} | {base[1]:<10} | {base[2]} | {base[3]:<13} | {base[4]:<3} | {'-':<6} | {'-':>9} | {'-':>9} | {'-':>7} | {'-':>10} | {'-':>4} |")
        else:
            print(f"| {base[0]:<20} | {base[1]:<10} | {base[2]} | {base[3]:<13} | {base[4]:<3} | {t['size']:<6} | "
                  f"{t['baseline']['median_us']:>9.1f} | {t['candidate']['median_us']:>9.1f} | {t['speedup']:>7.3f} | {t['busbw_gbps']:>10.1f} | "
                  f"{(format(100 * t['roofline']['fraction'], '.0f') + '%') if t.get('roofline') else '-':>4} |")
PY
