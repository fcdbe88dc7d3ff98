#!/usr/bin/env bash
# Installs what Accord needs to build, test and run its demo on Debian 12, skipping what is
# already there. Safe to run again. Needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
  meson ninja-build pkg-config g++ python3
  libopenmpi-dev openmpi-bin           # mpirun, MPI bootstrap and comparison benchmarks
  libhwloc-dev                         # topology: PCI tree and NUMA
  libopenblas-dev zlib1g-dev           # trainer
  dataset-fashion-mnist                # trainer's default data
  libgtest-dev libbenchmark-dev        # tests and microbenchmarks
  iproute2                             # multi-host tests in network namespaces
  python3-numpy                        # Python example (ctypes)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
