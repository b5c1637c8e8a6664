#!/usr/bin/env bash
# The figures of docs/architecture.md's module table, from the tree as it is:
# per module, its source files, its public headers (include/), its lines and
# its largest file. Rerun after a change and paste the table.
set -euo pipefail
cd "$(dirname "$0")/.."
printf '| module | files | public headers | lines | largest file (lines) |\n|---|---:|---:|---:|---|\n'
for m in core providers evaluator results agent remote apps tasks; do
  mapfile -t files < <(git ls-files -- "$m" | grep -E '\.(cc|h|cu|cuh|cpp)$')
  headers=$(git ls-files -- "$m/include" | grep -c -E '\.h$' || true)
  lines=$(cat "${files[@]}" | wc -l)
  largest=$(wc -l "${files[@]}" | grep -v ' total$' | sort -n | tail -1 | awk '{print $2 " (" $1 ")"}')
  printf '| %s | %d | %d | %d | %s |\n' "$m" "${#files[@]}" "$headers" "$lines" "$largest"
done
