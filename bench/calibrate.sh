#!/usr/bin/env bash
# Calibrates the tuner (Note [Tuner model], collectives/tuner.hpp) and checks its picks.
#
# 1. For each rank count, one mpirun job of bench/all_reduce_algos times every all-reduce
#    candidate (ring, tree and both with 64 KiB chunks, direct, recursive doubling) at 8 B and
#    16 B..256 MiB by 4x, each on two communicators of its own, interleaved round by round
#    (Note [Interleaved calibration]); the slower of each candidate's two medians goes to the
#    tune file.
# 2. Unless --no-check: a second job per rank count times every candidate again beside the
#    tuner's own communicator (ACCORD_TUNE_FILE set to the new file; its picks read from its
#    ACCORD_LOG=tune:info lines) and prints a Markdown table: each candidate's time per size,
#    the pick, and the pick's time over the fastest, both from this second job. Exit status 1
#    if any pick is more than 10% slower than the fastest.
#
# Samples taken while the machine is in a slow state are taken again (Note [Machine state
# probe] in all_reduce_algos.cpp: on the project's VM a cache line's round trip between the
# cores goes from 120-130 ns to 520-590 ns for seconds to minutes at a time, and every
# all-reduce below a few MiB slows down, some algorithms more than others). Each job's probe
# line (best probe, samples retaken, seconds waited) goes to stderr and under its table.
#
# Ranks are bound to cores (--bind-to core:overload-allowed --map-by core: with 4 ranks on 2
# cores, two to a core), so both jobs see the same placement. Unbound, the scheduler placed the
# 4 processes differently from job to job: in two jobs (8 B-256 KiB, 7 rounds) rd at 8 B took
# 3.6 us in one and 5.5-6.2 in the other, ring at 16 KiB 16-17 and 14-15. Bound, the same two
# jobs agreed within 5% for most candidates and sizes, 13% at worst (rd, 16 KiB). --no-bind
# leaves placement to mpirun.
#
# Usage: bench/calibrate.sh [BUILD_DIR] [--ranks "2 4"] [--rounds N] [--out FILE] [--no-check] [--no-bind]
# Then: ACCORD_TUNE_FILE=FILE mpirun --bind-to core ... your program
set -euo pipefail
build=build; ranks="2 4"; rounds=5; out=accord.tune; check=1; bind=1
while [ $# -gt 0 ]; do
  case $1 in
    --ranks) ranks=$2; shift ;;
    --rounds|--reps) rounds=$2; shift ;;
    --out) out=$2; shift ;;
    --no-check) check=0 ;;
    --no-bind) bind=0 ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    -*) echo "calibrate.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) build=$1 ;;
  esac
  shift
done
prog="$build/bench/all_reduce_algos"
[ -x "$prog" ] || { echo "calibrate.sh: $prog not found; build first (scripts/build.sh)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "calibrate.sh: needs mpirun (apt-get install openmpi-bin)" >&2; exit 2; }
flags=(--oversubscribe)
[ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
[ "$bind" = 1 ] && flags+=(--bind-to core:overload-allowed --map-by core)
# Note [No real-time priority]: a high nice priority keeps other work on a small machine from
# distorting the runs (root only). Not chrt -r: the kernel lets real-time tasks use 950 ms of
# every second (sched_rt_runtime_us), so ranks that keep both cores busy were stopped for 50 ms
# each second (dmesg: "RT throttling activated"), and 6 of 36 samples of 130 ms came out 40%
# slower (4 ranks, rd at 16 KiB: 9.8-11.0 us against 6.9-8.8); without it, all 36 7.5-9.1.
rt=(); [ "$(id -u)" = 0 ] && rt=(nice -n -10)
candidates=ring,ring/64K,tree,tree/64K,direct,rd
sizes=${ACCORD_CALIBRATE_SIZES:-8,16,64,256,1K,4K,16K,64K,256K,1M,4M,16M,64M,256M}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# job NP NAME [ARGS...]: one all_reduce_algos job; table to $tmp/NAME.npNP, logs beside.
job() {
  local np=$1 name=$2; shift 2
  "${rt[@]}" mpirun "${flags[@]}" -np "$np" -x ACCORD_LOG "$prog" --sizes "$sizes" --rounds "$rounds" \
    --candidates "$candidates" "$@" > "$tmp/$name.np$np" 2> "$tmp/$name.np$np.log" || {
    echo "calibrate.sh: all_reduce_algos failed on $np ranks:" >&2; cat "$tmp/$name.np$np.log" >&2; exit 2; }
  grep "^# probe" "$tmp/$name.np$np" | sed 's/^# /    /' >&2 || true
  if grep -q "FAILED" "$tmp/$name.np$np"; then
    echo "calibrate.sh: wrong results on $np ranks:" >&2; grep "wrong" "$tmp/$name.np$np" >&2; exit 2
  fi
}

echo "calibrating: {$candidates} x ranks {$ranks}, $rounds interleaved rounds" >&2
{ echo "accord-tune 1"
  echo "# written by bench/calibrate.sh on $(hostname) at $(date '+%Y-%m-%d %H:%M'): median of $rounds interleaved rounds"
  echo "# all_reduce NRANKS ALGO CHUNK_BYTES BYTES TIME_US"; } > "$tmp/tune"
for np in $ranks; do
  echo "  $np ranks" >&2
  # Every candidate on two communicators; the tune file gets the slower median of the two.
  ACCORD_LOG=warn job "$np" cal --no-tuner --out "$tmp/cal.np$np.tune" --candidates "$candidates,$candidates"
  grep "^all_reduce" "$tmp/cal.np$np.tune" >> "$tmp/tune"
done
cp "$tmp/tune" "$out"
echo "wrote $out ($(grep -c '^all_reduce' "$out") measurements)" >&2
[ "$check" = 1 ] || exit 0

echo "checking the tuner's picks with ACCORD_TUNE_FILE=$out" >&2
for np in $ranks; do
  echo "  $np ranks" >&2
  ACCORD_LOG=warn,tune:info job "$np" chk --tune-file "$(realpath "$out")"
done
python3 - "$tmp" "$ranks" "$rounds" <<'PY'
import re, sys
tmp, ranks, rounds = sys.argv[1], sys.argv[2].split(), sys.argv[3]
def label(size):
    return f"{size} B" if size < 1024 else (f"{size >> 10} KiB" if size < 1 << 20 else f"{size >> 20} MiB")
worst = 0.0
for np_ in ranks:
    rows, names, probe = [], [], ""
    for line in open(f"{tmp}/chk.np{np_}"):
        f = line.split()
        if line.startswith("#") and f[1:2] == ["bytes"]:
            names = f[2:]
        elif line.startswith("# probe"):
            probe = line[2:].strip()
        elif f and not line.startswith("#"):
            rows.append((int(f[0]), dict(zip(names, map(float, f[1:])))))
    picks = {}
    for line in open(f"{tmp}/chk.np{np_}.log"):
        m = re.search(r"r0/\d+\] INFO tune all_reduce of (\d+) bytes \(\d+ ranks\): (\w+), chunk (\d+) KiB \((.*)\)$", line)
        if m and "forced by ACCORD_ALGO" not in m.group(4):
            size, algo, kib = int(m.group(1)), m.group(2), int(m.group(3))
            picks[size] = algo if kib == 256 else f"{algo}/{kib}K"
    cands = [n for n in names if n != "tuner"]
    print(f"\n{np_} ranks, float32 sum, time in us, median of {rounds} interleaved rounds (in and out of place) per column\n")
    print("| size | " + " | ".join(cands) + " | tuner's pick | pick / fastest | tuner (measured) |")
    print("|---:|" + "---:|" * len(cands) + ":---|---:|---:|")
    for size, t in rows:
        fastest = min(t[n] for n in cands)
        pick = picks.get(size, "?")
        ratio = t[pick] / fastest if pick in t else float("inf")
        worst = max(worst, ratio)
        cells = [f"**{t[n]:.2f}**" if t[n] == fastest else f"{t[n]:.2f}" for n in cands]
        print(f"| {label(size)} | " + " | ".join(cells) + f" | {pick} | {ratio:.2f} | {t.get('tuner', float('nan')):.2f} |")
    if probe:
        print(f"\n{probe[0].upper()}{probe[1:]}")
print(f"\nworst pick / fastest: {worst:.2f} ({'within' if worst <= 1.10 else 'NOT within'} 10%)")
sys.exit(0 if worst <= 1.10 else 1)
PY
