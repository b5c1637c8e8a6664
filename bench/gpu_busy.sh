#!/usr/bin/env bash
# How busy kforge keeps the GPU when the model costs nothing: a run over every
# task whose "model" is a cassette answering instantly with a known-good kernel
# (the task's first hand-written solution, else its reference), one-shot, one
# sample. The run summary's gpu_busy_fraction is the GPU slots' busy seconds
# over wall seconds; attempts per hour is evaluations over wall time. What is
# left between 1.0 and the fraction is kforge's own host work (compiles, group
# starts, input generation, the oracle).
#
#   bench/gpu_busy.sh                 # W=2, every task
#   W=4 TASKS='00*' bench/gpu_busy.sh
#   BUILD=build-gpu OUT=/tmp/busy bench/gpu_busy.sh
#   SAMPLES=3 bench/gpu_busy.sh       # repeated attempts per task: later ones reuse the baseline
#   TIMING_CAP=0.25 bench/gpu_busy.sh # the run's --timing-cap (default: the evaluator's 0.5 s)
#
# Then each evaluation, in order: its seconds, verdict, which served groups
# were started ahead (warm), the speedup per bench size and its largest phases.
#
# Without a GPU the run is compile-only and the fraction is null (reported as
# such). Numbers go in bench/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
W=${W:-2}
TASKS=${TASKS:-*}
SAMPLES=${SAMPLES:-1}
TIMING_CAP=${TIMING_CAP:-0}
OUT=${OUT:-$(mktemp -d /tmp/kforge-busy-XXXXXX)}
KFORGE="$BUILD/bin/kforge"
[[ -x "$KFORGE" ]] || { echo "gpu_busy: no $KFORGE (build first, or set BUILD)" >&2; exit 2; }
mkdir -p "$OUT"

cassette="$OUT/cassette.jsonl"
python3 - "$cassette" <<'PY'
import glob, json, os, sys
with open(sys.argv[1], "w") as f:
    f.write("# gpu_busy.sh: every task answered at once with a known-good kernel\n")
    for d in sorted(glob.glob("tasks/[0-9]*_*/")):
        key = os.path.basename(d.rstrip("/"))
        sols = sorted(glob.glob(os.path.join(d, "solutions", "*.cu")))
        src = sols[0] if sols else os.path.join(d, "reference.cu")
        text = "```cuda\n" + open(src).read() + "\n```"
        f.write(json.dumps({"turn": 0, "marker": f"# Task {key}:", "response": {"text": text}}) + "\n")
PY

name="busy-w$W-$(date +%H%M%S)"
"$KFORGE" run --models "replay:$cassette" --tasks "$TASKS" --world "$W" --strategy one-shot \
  --samples "$SAMPLES" --timing-cap "$TIMING_CAP" --out "$OUT" --name "$name" \
  --json "$OUT/summary.json" > "$OUT/run.log" 2>&1 || true
python3 - "$OUT/summary.json" "$W" <<'PY'
import json, sys
path, w = sys.argv[1:]
try:
    s = json.load(open(path))
except Exception as e:
    sys.exit(f"gpu_busy: no run summary at {path} ({e}); see run.log beside it")
wall = s.get("wall_s") or 0
sessions = s.get("sessions", [])
evaluated = sum(1 for x in sessions if not x.get("not_evaluated"))
busy = s.get("gpu_busy_fraction")
outcomes = {}
for x in sessions:
    outcomes[x.get("best_outcome")] = outcomes.get(x.get("best_outcome"), 0) + 1
print(f"W={w}: {len(sessions)} sessions, {evaluated} evaluated, wall {wall:.1f} s")
print(f"  gpu_busy_fraction: {'null (compile-only: no GPU)' if busy is None else format(busy, '.3f')}")
attempts = sum(m.get("turns", 0) for m in s.get("models", {}).values())
print(f"  evaluations: {attempts}")
if wall > 0:
    print(f"  attempts per hour: {attempts * 3600 / wall:.0f}")
print(f"  outcomes: {outcomes}")
PY
echo "  run store: $OUT ($name)"
python3 - "$OUT/$name" <<'PY'
import json, os, sqlite3, sys
run = sys.argv[1]
db = os.path.join(run, "store.sqlite")
if not os.path.exists(db):
    sys.exit(0)
rows = sqlite3.connect(db).execute(
    "select e.doc_sha, e.seconds, e.status, s.task from evaluations e "
    "join sessions s on s.id = e.session_id order by e.id").fetchall()
for sha, seconds, status, task in rows:
    try:
        doc = json.load(open(os.path.join(run, "blobs", sha[:2], sha)))
    except (OSError, ValueError):
        doc = {}
    warm = ",".join(k[:-6] for k in ("candidate_group", "reference_group", "expert_group")
                    if (doc.get(k) or {}).get("warm")) or "none"
    speedups = " ".join(f"{t.get('size')}:{t.get('speedup', 0):.3f}" for t in doc.get("timing") or [])
    phases = sorted((doc.get("phases_s") or {}).items(), key=lambda kv: -kv[1])[:4]
    top = " ".join(f"{k}={v:.2f}" for k, v in phases)
    print(f"  {task} {seconds:.2f} s {status} warm={warm} {speedups} | {top}")
PY
