#!/usr/bin/env bash
# bench/machine.sh (the head of compare.sh's tables): names this machine's CPU model as
# /proc/cpuinfo does, and sorts every flag it looks for into present or absent, each once,
# agreeing with /proc/cpuinfo.
# Usage: machine_header.sh SOURCE_ROOT
set -eu
out=$("$1/bench/machine.sh" build)
echo "$out"
model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
line=$(grep '^Machine: ' <<<"$out")
[[ -z $model || $line == *"$model"* ]] || { echo "FAIL: the model '$model' is not in: $line"; exit 1; }
flags_line=$(grep '^CPU flags: ' <<<"$out") || { echo "FAIL: no 'CPU flags:' line"; exit 1; }
have=${flags_line#CPU flags: }; have=${have%%;*}
lack=${flags_line#*; absent: }
cpu=" $(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo | head -1) "
for f in avx2 avx512f erms fsrm movdir64b; do
  n=$(tr ' ' '\n' <<<"$have $lack" | grep -cx "$f" || true)
  [ "$n" = 1 ] || { echo "FAIL: $f listed $n times"; exit 1; }
  if [[ $cpu == *" $f "* ]]; then
    [[ " $have " == *" $f "* ]] || { echo "FAIL: $f is in /proc/cpuinfo but not listed as present"; exit 1; }
  else
    [[ " $lack " == *" $f "* ]] || { echo "FAIL: $f is not in /proc/cpuinfo but not listed as absent"; exit 1; }
  fi
done
grep -q '^Load at start' <<<"$out" || { echo "FAIL: no load line"; exit 1; }
echo PASS
