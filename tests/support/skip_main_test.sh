#!/usr/bin/env bash
# Every GoogleTest binary of the build reports skips as skips (issue 38 item 3): run with
# ACCORD_TEST_SKIP_ALL=1 and its first test selected, each must exit 77, which only
# support/gtest_skip_main.cpp does (gtest's own main would run the test and exit 0). The
# binaries are those of the build's tests with protocol gtest (meson-info/intro-tests.json) and
# every other executable of the build that has GoogleTest in it (its --gtest_list_tests help
# text; meson-info/intro-targets.json), so that one run as a plain exit-code test, or by a
# script, cannot link gtest's own main unseen.
# Usage: skip_main_test.sh BUILD_DIR
set -u
build=$1
mapfile -t binaries < <(python3 - "$build/meson-info" <<'PY'
import json, os, sys
info = sys.argv[1]
found = {t["cmd"][0] for t in json.load(open(os.path.join(info, "intro-tests.json"))) if t["protocol"] == "gtest"}
for target in json.load(open(os.path.join(info, "intro-targets.json"))):
    if target["type"] != "executable":
        continue
    for exe in target["filename"]:
        if os.path.isfile(exe) and b"--gtest_list_tests" in open(exe, "rb").read():
            found.add(exe)
for exe in sorted(found):
    print(exe)
PY
)
[ "${#binaries[@]}" -gt 0 ] || { echo "FAIL: no gtest tests listed in $build/meson-info/intro-tests.json"; exit 1; }
failures=0
for exe in "${binaries[@]}"; do
  # The first test "Suite.Name" of --gtest_list_tests ("Suite." then "  Name" lines).
  first=$("$exe" --gtest_list_tests 2>/dev/null | awk '/^[^ ]/ { s = $1 } /^  / { print s $1; exit }')
  if [ -z "$first" ]; then
    echo "FAIL - $exe: --gtest_list_tests listed no test"
    failures=$((failures + 1))
    continue
  fi
  out=$(ACCORD_TEST_SKIP_ALL=1 "$exe" --gtest_filter="$first" 2>&1)
  status=$?
  if [ "$status" = 77 ]; then
    echo "ok   - ${exe#"$build"/}: exit 77 with every test skipped"
  else
    echo "FAIL - ${exe#"$build"/}: exit $status with every test skipped, not 77: link gtest_skip_main_dep" \
      "(tests/meson.build), not gtest's own main"
    tail -5 <<<"$out" | sed 's/^/    /'
    failures=$((failures + 1))
  fi
done
[ "$failures" = 0 ] || { echo "$failures of ${#binaries[@]} binaries do not report skips"; exit 1; }
echo "ok: all ${#binaries[@]} GoogleTest binaries report skips as skips"
