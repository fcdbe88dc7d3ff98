#!/usr/bin/env bash
# Installs what Accord needs to build, test and run its demo on Debian 12, skipping what is
# already there. Safe to run again. Needs root (or sudo) only when something is missing.
#
# usage: scripts/setup.sh [--demo]
#   --demo  only what scripts/demo.sh needs: the packages, and the CUDA tools only where a GPU
#           is (the demo leaves the CUDA kernels out of a build without one); not mpi4py's tests
set -euo pipefail
demo=0
case ${1:-} in
  --demo) demo=1 ;;
  "") ;;
  *) echo "setup.sh: unknown argument '$1' (usage: scripts/setup.sh [--demo])" >&2; exit 2 ;;
esac

packages=(
  meson ninja-build pkg-config g++ python3
  libopenmpi-dev openmpi-bin           # mpirun, MPI bootstrap and comparison benchmarks
  libhwloc-dev                         # topology: PCI tree and NUMA
  libopenblas-dev zlib1g-dev           # trainer
  dataset-fashion-mnist                # trainer's default data
  libgtest-dev libbenchmark-dev        # tests and microbenchmarks
  iproute2                             # multi-host tests in network namespaces
  python3-numpy                        # Python example (ctypes)
  python3-mpi4py                       # mpi4py's test suite under libaccord_mpi.so (tests/mpi)
)

root=$(cd "$(dirname "$0")/.." && pwd)

# With the CUDA toolkit: two tools from PyPI, into .tools/cuda-pypi (meson's -Dnvidia_tools):
# CUDA 12's ptxas, which builds the sm_70 (Volta) kernels CUDA 13 no longer can, and CUDA 13's
# cuobjdump, which the test kernels_cuda_fatbin runs on the library (the toolkit here lacks it).
cuda_tools() {
  local nvcc dir="$root/.tools/cuda-pypi"
  nvcc=$(command -v nvcc || true)
  [ -n "$nvcc" ] || [ ! -x /usr/local/cuda/bin/nvcc ] || nvcc=/usr/local/cuda/bin/nvcc
  [ -n "$nvcc" ] || return 0
  if [ -x "$dir/nvidia/cuda_nvcc/bin/ptxas" ] && [ -x "$dir/nvidia/cu13/bin/cuobjdump" ]; then
    echo "setup: CUDA tools present in $dir"
    return 0
  fi
  local py
  for py in python3 /usr/bin/python3; do
    if "$py" -m pip --version >/dev/null 2>&1; then
      echo "setup: installing CUDA 12 ptxas and cuobjdump from PyPI into $dir"
      if "$py" -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --target "$dir" \
        nvidia-cuda-nvcc-cu12==12.9.86 nvidia-cuda-cuobjdump==13.4.92; then
        return 0
      fi
    fi
  done
  echo "setup: WARNING: could not pip-install the CUDA tools; the build leaves sm_70 out" \
    "and kernels_cuda_fatbin cannot run cuobjdump" >&2
}

# mpi4py's own tests, for tests/mpi/mpi4py_suite.sh: the test/ folder of the PyPI sdist that
# matches Debian's python3-mpi4py (3.1.4; the Debian package ships no tests), into
# .tools/mpi4py-3.1.4/test. Without it those tests skip.
mpi4py_tests() {
  local version=3.1.4 dir="$root/.tools" py tmp
  if [ -f "$dir/mpi4py-$version/test/runtests.py" ]; then
    echo "setup: mpi4py $version tests present in $dir"
    return 0
  fi
  mkdir -p "$dir"
  for py in python3 /usr/bin/python3; do
    "$py" -m pip --version >/dev/null 2>&1 || continue
    tmp=$(mktemp -d)
    if "$py" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: -d "$tmp" \
      "mpi4py==$version" && tar -xzf "$tmp/mpi4py-$version.tar.gz" -C "$dir" "mpi4py-$version/test"; then
      rm -rf "$tmp"
      echo "setup: fetched mpi4py $version's tests into $dir/mpi4py-$version/test"
      return 0
    fi
    rm -rf "$tmp"
  done
  echo "setup: WARNING: could not fetch mpi4py $version's tests with pip; the mpi4py_np* tests" \
    "will skip" >&2
}

missing=()
for p in "${packages[@]}"; do
  # Compare the whole output, not `| grep -q`: under pipefail its early exit can fail the pipe.
  [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == *"install ok installed"* ]] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
else
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ $demo = 0 ]; then
  cuda_tools
  mpi4py_tests
elif "$root/scripts/gpu-present.sh"; then
  cuda_tools
fi
