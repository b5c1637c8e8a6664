#!/usr/bin/env bash
# `make demo`: kforge run end to end on a bundled cassette of SCRIPTED replies
# (examples/demo/cassette.jsonl, written by hand, not recorded from a model):
# per task a reply that fails to compile, a fix that gives a wrong answer, a
# correct kernel, then a faster one. With a GPU every kernel is evaluated for
# real; without one the run stops each session once a kernel compiles, says
# so, and still prints the summary and writes the store.
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
KF="$BUILD/bin/kforge"
if [ ! -x "$KF" ]; then
  echo "demo: $KF not found; build first (make build)" >&2
  exit 1
fi
OUT=runs
rm -rf "$OUT/demo"

echo "== kforge demo: the model is a replay of scripted replies (examples/demo/cassette.jsonl) =="
echo
echo "== the first prompt of task 001_allreduce (kforge prompt, first 25 lines) =="
"$KF" prompt --task 001_allreduce --strategy refine --hardware h100_8 --world 2 2>/dev/null | head -n 25 || true
echo "   [...]"
echo
echo "== kforge run examples/demo/demo.toml =="
"$KF" run examples/demo/demo.toml --out "$OUT"
echo
echo "== the record, turn by turn (kforge show) =="
if show_out=$("$KF" show "$OUT/demo" 2>&1); then
  printf '%s\n' "$show_out" | head -n 60
else
  echo "(kforge show failed: $show_out)"
fi
