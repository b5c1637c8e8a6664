#!/usr/bin/env bash
# The reference timed against itself (its true speedup is 1), N times in a
# fresh `kforge eval` each, traced per block: per run its seconds, speedup and
# interval per bench size and the blocks of each side; then
# bench/interval_coverage.py over the traces (how often each interval held
# 1.0, and the spread). Needs a GPU; numbers go in bench/results/.
#
#   bench/reference_spread.sh                       # task 001, W=2, 12 runs
#   N=6 W=4 TASK=013 BUILD=build-gpu bench/reference_spread.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
N=${N:-12}
W=${W:-2}
TASK=${TASK:-001}
OUT=${OUT:-$(mktemp -d /tmp/kforge-spread-XXXXXX)}
KFORGE="$BUILD/bin/kforge"
[[ -x "$KFORGE" ]] || { echo "reference_spread: no $KFORGE (build first, or set BUILD)" >&2; exit 2; }
dir=$(compgen -G "tasks/${TASK}_*/" | head -1 || true)
[[ -n "$dir" && -f "$dir/reference.cu" ]] || { echo "reference_spread: no task $TASK under tasks/" >&2; exit 2; }
mkdir -p "$OUT"
for i in $(seq 1 "$N"); do
  if ! KFORGE_TIMING_TRACE="$OUT/spread-$i.jsonl" "$KFORGE" eval --task "$TASK" \
      --kernel "$dir/reference.cu" --trusted --world "$W" --json "$OUT/$i.json" > "$OUT/$i.log" 2>&1; then
    echo "run $i: kforge eval failed (see $OUT/$i.log)"; tail -3 "$OUT/$i.log"; continue
  fi
  python3 - "$OUT/$i.json" "$i" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
parts = []
for t in d.get("timing") or []:
    lo, hi = t.get("speedup_ci95", [0, 0])
    parts.append(f"{t['size']} {t['speedup']:.3f} [{lo:.3f}, {hi:.3f}] "
                 f"blocks {t['baseline'].get('blocks')}/{t['candidate'].get('blocks')}")
print(f"run {sys.argv[2]}: {d.get('status')} {d.get('seconds', 0):.2f} s | " + " | ".join(parts))
PY
done
python3 bench/interval_coverage.py "$OUT"
echo "traces and results: $OUT"
