#!/usr/bin/env bash
# The link-time side of the module walls (scripts/include-walls.sh checks the
# includes): the objects and archives given reference no symbol of the agent,
# so `kforge eval`, `tasks`, `eval-server` and remote evaluation work without
# any LLM agent code. Run by ctest (tests/cli/CMakeLists.txt) on the built
# objects; each argument may be a ';'-separated list (CMake's $<TARGET_OBJECTS>).
set -uo pipefail
status=0
checked=0
for arg in "$@"; do
  IFS=';' read -r -a files <<<"$arg"
  for f in "${files[@]}"; do
    [[ -n "$f" ]] || continue
    if [[ ! -f "$f" ]]; then
      echo "symbol-walls: $f: no such object" >&2
      status=1
      continue
    fi
    checked=$((checked + 1))
    hits=$(nm -C --undefined-only "$f" | grep 'kforge::agent::')
    if [[ -n "$hits" ]]; then
      echo "symbol-walls: $f references agent code:" >&2
      echo "$hits" | head -5 >&2
      status=1
    fi
  done
done
[[ $checked -gt 0 ]] || { echo "symbol-walls: nothing to check" >&2; exit 1; }
[[ $status -eq 0 ]] && echo "symbol-walls: $checked file(s) reference no agent code"
exit $status
