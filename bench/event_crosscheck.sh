#!/usr/bin/env bash
# Does kforge's claimed event time of a kernel agree with an independent
# timer? For each solution of the pure-collective tasks (their kernels need no
# harness), at each bench size: the candidate median of `kforge eval` (the
# claimed time that ranks it) against bench/event_loop.cc's median of the same
# kernel, same size, same W. Prints a table; the goal is agreement within 3%.
#
#   bench/event_crosscheck.sh                     # W=2, tasks 001-008, their first bench size
#   W=4 TASKS='00[1-4]*' SIZES=all bench/event_crosscheck.sh
#   BUILD=build-gpu bench/event_crosscheck.sh
#
# Needs a GPU (with fewer GPUs than W, ranks share GPU 0 in both). Numbers go
# in bench/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
W=${W:-2}
TASKS=${TASKS:-00[1-8]_*}
SIZES=${SIZES:-first}
KFORGE="$BUILD/bin/kforge"
LOOP="$BUILD/tests/evaluator/worker/event_loop"
for b in "$KFORGE" "$LOOP"; do
  [[ -x "$b" ]] || { echo "event_crosscheck: no $b (build first, or set BUILD)" >&2; exit 2; }
done
OUT=$(mktemp -d /tmp/kforge-crosscheck-XXXXXX)
printf '| kernel | size | kforge claimed us | event loop us | ratio |\n|---|---|---:|---:|---:|\n'
worst=0
for dir in tasks/$TASKS; do
  task=$(basename "$dir")
  mapfile -t sizes < <(python3 - "$dir/task.toml" "$SIZES" <<'PY'
import sys, tomllib
bench = tomllib.load(open(sys.argv[1], "rb"))["sizes"]["bench"]
labels = [b["label"] for b in bench]
print("\n".join(labels if sys.argv[2] == "all" else labels[:1] if sys.argv[2] == "first" else sys.argv[2].split(",")))
PY
  )
  for kernel in "$dir"/solutions/*.cu; do
    [[ -f "$kernel" ]] || continue
    for size in "${sizes[@]}"; do
      json="$OUT/$task-$(basename "$kernel" .cu)-$size.json"
      if ! "$KFORGE" eval --task "$task" --kernel "$kernel" --world "$W" --bench-size "$size" \
        --json "$json" >/dev/null 2>"$OUT/err"; then
        echo "| $task/$(basename "$kernel") | $size | (kforge eval failed: $(tail -1 "$OUT/err")) | | |"
        continue
      fi
      claimed=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(next(t["candidate"]["median_us"] for t in d["timing"] if t["size"]==sys.argv[2]))' "$json" "$size")
      loop=$("$LOOP" --task "$task" --kernel "$kernel" --world "$W" --size "$size" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["median_us"])')
      ratio=$(python3 -c "print(f'{$claimed / $loop:.3f}')")
      worst=$(python3 -c "print(max($worst, abs($claimed / $loop - 1)))")
      printf '| %s/%s | %s | %.2f | %.2f | %s |\n' "$task" "$(basename "$kernel")" "$size" "$claimed" "$loop" "$ratio"
    done
  done
done
python3 -c "print(f'largest disagreement: {100 * $worst:.1f}% (goal: within 3%)')"
rm -rf "$OUT"
