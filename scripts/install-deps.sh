#!/usr/bin/env bash
# Installs every Debian package kforge needs to build and test. Idempotent: quiet
# when everything is already there. Pass --with-browser to also install Chromium
# (used by the web UI test), --with-fuzz for clang and its libFuzzer runtime
# (scripts/fuzz.sh, and clang for scripts/thread-safety.sh; Debian's clang
# only recommends libclang-rt-dev), --with-slurm
# for Slurm and munge (scripts/slurm-ci.sh: the `slurm` tests' cluster).
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libcurl4-openssl-dev nlohmann-json3-dev libcpp-httplib-dev libfmt-dev
  libgtest-dev libgmock-dev libsqlite3-dev libtomlplusplus-dev libcli11-dev
  libkainjow-mustache-dev libssl-dev libseccomp-dev clang-format
)
for arg in "$@"; do
  case "$arg" in
    --with-browser) packages+=(chromium) ;;
    --with-fuzz) packages+=(clang libclang-rt-dev) ;;
    --with-slurm) packages+=(slurmctld slurmd slurm-client munge) ;;
    *)
      echo "install-deps: unknown option $arg (--with-browser, --with-fuzz, --with-slurm)" >&2
      exit 2
      ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The CUDA toolkit is not a Debian package here: it must come from NVIDIA.
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
if [[ ! -x "$cuda_home/bin/nvcc" ]]; then
  cat >&2 <<MSG
install-deps: no CUDA toolkit at $cuda_home (looked for $cuda_home/bin/nvcc).
  kforge needs nvcc (CUDA >= 12.4) and NCCL headers to build.
  Install the CUDA toolkit from NVIDIA's repository (package cuda-toolkit-13-0 or
  cuda-toolkit-12-8) and NCCL (libnccl-dev), or set CUDA_HOME to where it lives.
MSG
  exit 1
fi
if [[ ! -f "$cuda_home/include/nccl.h" && ! -f /usr/include/nccl.h ]]; then
  echo "install-deps: NCCL headers not found in $cuda_home/include or /usr/include: install libnccl-dev" >&2
  exit 1
fi
