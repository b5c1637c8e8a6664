#!/usr/bin/env bash
# Formats the tree with the repository's .clang-format, or checks it (--check).
# Task solutions and the demo's kernels are excluded: they are in-context
# examples for models, and some of the demo's are broken on purpose.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cpp' | grep -v -E '/solutions/|^examples/demo/kernels/|^tests/adversarial/kernels/')
fmt=${CLANG_FORMAT:-clang-format}
if ! command -v "$fmt" >/dev/null; then
  echo "format: $fmt not found (apt-get install clang-format)" >&2
  exit 2
fi
if [[ "${1:-}" == "--check" ]]; then
  bad=0
  for f in "${files[@]}"; do
    if ! "$fmt" --style=file "$f" | cmp -s - "$f"; then
      echo "format: $f differs from .clang-format (run scripts/format.sh)" >&2
      bad=1
    fi
  done
  exit $bad
fi
"$fmt" --style=file -i "${files[@]}"
