#!/usr/bin/env bash
# Installs what kfuse builds with, from Debian/Ubuntu packages, where it is missing:
# CMake + Ninja + g++ + ccache, fmt and doctest, clang and libFuzzer's runtime (the parser fuzz test),
# Python's headers and venv (the Python package; pip brings nanobind and scikit-build-core).
# CUDA 13 is expected at /usr/local/cuda (NVRTC and the headers; no GPU or driver needed).
set -euo pipefail
packages=(cmake ninja-build g++ ccache libfmt-dev doctest-dev clang libclang-rt-14-dev python3-dev python3-venv)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ ! -f /usr/local/cuda/include/nvrtc.h ]; then
  echo "kfuse needs the CUDA 13 toolkit at /usr/local/cuda (NVRTC); it was not found" >&2
  exit 1
fi
