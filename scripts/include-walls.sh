#!/usr/bin/env bash
# The module walls (docs/architecture.md): which module's public headers each
# module may include. A new include across a wall fails CI here, naming the
# file and the line, before it grows into a dependency cycle.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
# check MODULE_PATHS... -- ALLOWED_MODULES...
check() {
  local paths=() allowed=()
  while [[ $1 != -- ]]; do paths+=("$1"); shift; done
  shift
  allowed=("$@")
  local pattern
  pattern="#include \"kforge/($(IFS='|'; echo "${allowed[*]}"))/"
  local hits
  hits=$(git grep -n -E '#include "kforge/[a-z_]+/' -- "${paths[@]}" | grep -v -E "$pattern")
  if [[ -n "$hits" ]]; then
    echo "include-walls: ${paths[*]} may include only kforge/{${allowed[*]}}/:" >&2
    echo "$hits" >&2
    status=1
  fi
}
check core -- core
check providers -- core providers
check evaluator -- core evaluator
check results -- core results
check remote -- core evaluator remote
check agent -- core evaluator providers results agent
# The commands that evaluate, list tasks or serve evaluations need no model,
# no run store and no agent.
check apps/kforge/eval_commands.cc apps/kforge/tasks_commands.cc apps/kforge/server_commands.cc \
  apps/kforge/slurm_setup.cc apps/worker apps/jail -- core evaluator remote
[[ $status -eq 0 ]] && echo "include-walls: ok"
exit $status
