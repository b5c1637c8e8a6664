#!/usr/bin/env bash
# Warm served groups, A/B on one machine: bench/gpu_busy.sh (evaluations back to
# back inside a run) with the candidate's group started ahead alone, then with
# the reference and expert groups too (KFORGE_WARM_TRUSTED_GROUPS=1), ROUNDS
# times interleaved. Compare each evaluation's seconds and the spread of the
# small sizes' speedups (docs/methodology.md, "Warm served groups").
#
#   bench/warm_groups_ab.sh                  # W=2, task 001, 5 evaluations a run, 2 rounds
#   W=8 ROUNDS=1 bench/warm_groups_ab.sh
#   BUILD=build-gpu TASKS='013*' bench/warm_groups_ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export W=${W:-2} TASKS=${TASKS:-001*} SAMPLES=${SAMPLES:-5} BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-$(mktemp -d /tmp/kforge-warm-ab-XXXXXX)}
for round in $(seq 1 "$ROUNDS"); do
  for trusted in 0 1; do
    echo "== round $round, KFORGE_WARM_TRUSTED_GROUPS=$trusted"
    KFORGE_WARM_TRUSTED_GROUPS=$trusted OUT="$OUT/r$round-t$trusted" bash bench/gpu_busy.sh
  done
done
