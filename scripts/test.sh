#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (unit, multiproc, mpi, gpu).
# Ends with a line "N passed, N failed, N skipped", with "(K passed with S of their tests
# skipped)" added when some binaries skipped part of their tests. Exit status 0 only when nothing
# failed.
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
logs=("$build/meson-logs/testlog.json")

# The unit and multiproc suites again under sanitizers (RELIABILITY.md): AddressSanitizer +
# UBSan, then ThreadSanitizer. Left out: the kernels' own arithmetic tests (single-threaded,
# minutes under TSan) and, under TSan, the topology tests (single-threaded parsing and search;
# the garbled-variants test ran past its timeout there) and the benchmark programs (the library paths they run are
# the core tests' own; the tests shrink their largest sizes there, see tests/support/harness.hpp).
# Skip with ACCORD_SANITIZERS=0 (or a test filter).
if [ "${ACCORD_SANITIZERS:-1}" = 1 ] && [ $# -eq 0 ]; then
  for san in address,undefined thread; do
    dir="$build-${san%%,*}"
    skip=(--no-suite kernels)
    [ "$san" = thread ] && skip+=(--no-suite bench --no-suite topology)
    if [ ! -f "$dir/build.ninja" ]; then
      meson setup "$dir" -Db_sanitize=$san -Db_lundef=false -Dbuildtype=debugoptimized -Dopenblas=disabled \
        -Dcuda=disabled >/dev/null || { echo "sanitizer build $san: setup failed"; status=1; continue; }
    fi
    if ! ninja -C "$dir" >/dev/null; then echo "sanitizer build $san failed"; status=1; continue; fi
    echo "== core suites under -fsanitize=$san"
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 TSAN_OPTIONS=halt_on_error=1 \
      meson test -C "$dir" --suite unit --suite multiproc "${skip[@]}" --num-processes 1 --no-rebuild \
      --print-errorlogs || status=1
    logs+=("$dir/meson-logs/testlog.json")
  done
fi

# The last line counts meson's results; a test binary that passed with some of its tests
# skipped (tests/support/gtest_skip_main.cpp prints "# skipped N of M tests") is named above it
# and counted in the same line, so a partial skip cannot pass unseen.
python3 - "${logs[@]}" <<'PY'
import json, re, sys
passed = failed = skipped = 0
partial = []
for path in sys.argv[1:]:
    for line in open(path):
        j = json.loads(line)
        r = j.get("result")
        if r in ("OK", "EXPECTEDFAIL"):
            passed += 1
            m = re.search(r"^# skipped (\d+) of (\d+) tests", j.get("stdout") or "", re.M)
            if m:
                partial.append((j.get("name"), path, int(m.group(1)), int(m.group(2))))
        elif r == "SKIP": skipped += 1
        else: failed += 1
for name, path, n, m in partial:
    print(f"passed with {n} of {m} tests skipped: {name} ({path})")
inner = sum(n for _, _, n, _ in partial)
extra = f" ({len(partial)} passed with {inner} of their tests skipped)" if partial else ""
print(f"{passed} passed, {failed} failed, {skipped} skipped{extra}")
PY
exit $status
