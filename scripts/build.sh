#!/usr/bin/env bash
# Configures (once) and builds Accord in ./build. Extra arguments go to `meson setup`
# (e.g. -Dcuda=disabled). BUILD_DIR overrides the directory.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$@"
elif [ $# -gt 0 ]; then
  meson configure "$build" "$@"
fi
ninja -C "$build"
