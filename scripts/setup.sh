#!/usr/bin/env bash
# Installs every Debian 12 package Orrery needs to build, test and generate its
# models (Chromium renders `orrery report` pages in a test). Idempotent:
# packages already present are skipped by apt.
set -euo pipefail

packages=(
  build-essential cmake ninja-build git
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  libonnx-dev libonnxifi libprotobuf-dev protobuf-compiler
  nlohmann-json3-dev libcli11-dev libgtest-dev libzstd-dev
  python3-onnx python3-numpy python3-jsonschema
  chromium fonts-dejavu-core fonts-liberation python3-pil
  libopenblas-dev libgloo-dev libopenmpi-dev openmpi-bin libmimalloc-dev
  clang libclang-rt-14-dev
  python3-venv python3-dev python3-torch python3-torchvision
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
