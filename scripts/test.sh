#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (unit, multiproc, mpi, gpu).
# Ends with a line "N passed, N failed, N skipped". Exit status 0 only when nothing failed.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
./scripts/setup.sh || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }
if ! ./scripts/build.sh; then
  echo "build failed"
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
fi
# Suites run one test binary at a time: the multi-process ones oversubscribe 2 cores.
meson test -C "$build" --num-processes 1 --print-errorlogs "$@"
status=$?
python3 - "$build/meson-logs/testlog.json" <<'PY'
import json, sys
passed = failed = skipped = 0
for line in open(sys.argv[1]):
    r = json.loads(line).get("result")
    if r in ("OK", "EXPECTEDFAIL"): passed += 1
    elif r == "SKIP": skipped += 1
    else: failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
exit $status
