#!/bin/sh
# Installs the build into a temporary prefix, moves the prefix, and runs the
# installed kforge from a directory without tasks/ or prompts/: it must read
# its tasks, prompts and kernel ABI from PREFIX/share/kforge (found relative
# to the executable), not from the source tree compiled in.
set -eu
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log" 2>&1; then
  cat "$tmp/install.log"
  exit 1
fi
mv "$tmp/prefix" "$tmp/moved"
share="$tmp/moved/share/kforge"
for f in bin/kforge bin/kforge-worker bin/kforge-jail share/kforge/include/kforge/kernel.h \
         share/kforge/tasks/001_allreduce/task.toml share/kforge/prompts/strategies/refine.toml; do
  [ -e "$tmp/moved/$f" ] || { echo "not installed: $f"; exit 1; }
done
# Marks in the installed copies: only a kforge reading the installed tree prints them.
printf '\n/* installed-abi-mark */\n' >> "$share/include/kforge/kernel.h"
cp "$share/prompts/strategies/refine.toml" "$share/prompts/strategies/installed-only.toml"
cd "$tmp"
unset KFORGE_TASKS_DIR KFORGE_PROMPTS_DIR KFORGE_ABI_HEADER KFORGE_WORKER || true
out=$("$tmp/moved/bin/kforge" tasks list --json -)
case "$out" in
  *"\"tasks_dir\": \"$share/tasks\""*) ;;
  *) echo "tasks not read from the installed tree:"; echo "$out" | head -5; exit 1 ;;
esac
case "$out" in *'"key": "001_allreduce"'*) ;; *) echo "no 001_allreduce: $out"; exit 1 ;; esac
"$tmp/moved/bin/kforge" prompt --task 1 --hardware h100_8 --strategy installed-only > prompt.txt
grep -q "installed-abi-mark" prompt.txt || { echo "the prompt's ABI header is not the installed one"; exit 1; }
echo "ok: installed kforge reads $share"
