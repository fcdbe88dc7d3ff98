#!/usr/bin/env bash
# Configures (once) and builds Accord in ./build. Extra arguments go to `meson setup`
# (e.g. -Dcuda=disabled). BUILD_DIR overrides the directory.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
if [ -f "$build/.demo-no-cuda" ]; then
  # scripts/demo.sh left the CUDA kernels out on a machine without a GPU; the full build has them.
  echo "build.sh: $build was configured by scripts/demo.sh without CUDA; setting -Dcuda=auto"
  meson configure "$build" -Dcuda=auto
  rm -f "$build/.demo-no-cuda"
fi
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$@"
elif [ $# -gt 0 ]; then
  meson configure "$build" "$@"
fi
ninja -C "$build"
