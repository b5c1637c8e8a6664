#!/usr/bin/env bash
# Clang's thread-safety analysis over every host C++ file of the modules
# (docs/architecture.md, "Locks"): a GUARDED_BY member touched without its
# lock, or a REQUIRES function called without it, fails the check. Reads
# the compile flags from BUILD/compile_commands.json (configuring BUILD
# first if it has none; nothing is built) and runs `clang++ -fsyntax-only`
# on the files in parallel. Prints the files that fail with clang's
# findings; exits 1 if any do.
#
#   bash scripts/thread-safety.sh [BUILD [PATH...]]
#
# BUILD defaults to build; PATHs (files or folders, e.g. remote/src) limit
# the check to the files under them. CLANGXX names the compiler (clang++);
# THREAD_SAFETY_FLAGS adds flags (e.g. -Wthread-safety-negative).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
shift || true
clangxx="${CLANGXX:-clang++}"
if ! command -v "$clangxx" >/dev/null; then
  echo "thread-safety: $clangxx not found (scripts/install-deps.sh --with-fuzz installs clang)" >&2
  exit 2
fi
if [[ ! -f "$build/compile_commands.json" ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi

# One job file per source (its folder and clang command, as JSON), from
# compile_commands.json. The modules' host sources only: no .cu, no tests,
# benches or task oracles. Flags clang does not need for a syntax check (the
# output, optimisation, debug info, the project's warnings and -Werror) are
# dropped; the analysis's warnings (with its beta checks) are turned on and
# made errors.
jobs_dir="$(mktemp -d)"
trap 'rm -rf "$jobs_dir"' EXIT
python3 - "$build/compile_commands.json" "$PWD" "$clangxx" "$jobs_dir" "$@" <<'PY'
import json, os, shlex, sys
db, root, clangxx, out = sys.argv[1:5]
only = [os.path.normpath(p) for p in sys.argv[5:]]
modules = ("core", "providers", "evaluator", "results", "agent", "remote", "apps")
drop = {"-c", "-g", "-O0", "-O1", "-O2", "-O3", "-Werror", "-Wall", "-Wextra"}
n = 0
for entry in json.load(open(db)):
    path = os.path.relpath(entry["file"], root)
    if not path.endswith(".cc") or path.split(os.sep)[0] not in modules:
        continue
    if only and not any(path == p or path.startswith(p + os.sep) for p in only):
        continue
    args = entry.get("arguments") or shlex.split(entry["command"])
    kept, skip = [], False
    for a in args[1:]:
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif a in drop or a.startswith("-W") or a == entry["file"]:
            continue
        else:
            kept.append(a)
    cmd = [clangxx, *kept, "-fsyntax-only", "-Wthread-safety", "-Wthread-safety-beta",
           "-Werror=thread-safety", "-Werror=thread-safety-beta",
           *os.environ.get("THREAD_SAFETY_FLAGS", "").split(), entry["file"]]
    with open(os.path.join(out, f"{n:04d}"), "w") as f:
        json.dump({"dir": entry["directory"], "file": path, "cmd": cmd}, f)
    n += 1
print(f"thread-safety: {n} files", file=sys.stderr)
PY

check_one() {
  python3 - "$1" <<'PY'
import json, subprocess, sys
job = json.load(open(sys.argv[1]))
r = subprocess.run(job["cmd"], cwd=job["dir"], capture_output=True, text=True)
if r.returncode != 0:
    print(f"FAIL {job['file']}\n{r.stderr}", flush=True)
    sys.exit(1)
PY
}
export -f check_one
if find "$jobs_dir" -type f -print0 | sort -z |
  xargs -0 -P"$(nproc)" -I{} bash -c 'check_one "$1"' _ {}; then
  echo "thread-safety: clean"
else
  echo "thread-safety: the files above break the locking rules (docs/architecture.md, Locks)" >&2
  exit 1
fi
