#!/usr/bin/env bash
# Calibrates the tuner (Note [Tuner model], collectives/tuner.hpp) and checks its picks.
#
# 1. Measures every all-reduce candidate (ring, tree and both with 64 KiB chunks, direct,
#    recursive doubling), forced with ACCORD_ALGO / ACCORD_CHUNK_BYTES, at 8 B and 16 B..256 MiB
#    by 4x, on each rank count, under mpirun; writes the medians (out-of-place and in-place
#    times of REPS interleaved runs) to the tune file.
# 2. Unless --no-check: measures every candidate again, and the tuner's own choice with
#    ACCORD_TUNE_FILE set (picks read from its ACCORD_LOG=tune:info lines), and prints a Markdown
#    table: each candidate's time per size, the pick, and the pick's time over the fastest
#    (both from this second run). Exit status 1 if any pick is more than 10% slower.
#
# Usage: bench/calibrate.sh [BUILD_DIR] [--ranks "2 4"] [--reps N] [--out FILE] [--no-check]
# Then: ACCORD_TUNE_FILE=FILE mpirun ... your program
set -euo pipefail
build=build; ranks="2 4"; reps=3; out=accord.tune; check=1
while [ $# -gt 0 ]; do
  case $1 in
    --ranks) ranks=$2; shift ;;
    --reps) reps=$2; shift ;;
    --out) out=$2; shift ;;
    --no-check) check=0 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) echo "calibrate.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) build=$1 ;;
  esac
  shift
done
prog="$build/bench/all_reduce_perf"
[ -x "$prog" ] || { echo "calibrate.sh: $prog not found; build first (scripts/build.sh)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "calibrate.sh: needs mpirun (apt-get install openmpi-bin)" >&2; exit 2; }
flags=(--oversubscribe)
[ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
# Real-time priority keeps other work on a small machine from distorting the runs (root only).
rt=(); [ "$(id -u)" = 0 ] && command -v chrt >/dev/null && rt=(chrt -r 10)
variants=(ring:262144 ring:65536 tree:262144 tree:65536 direct:262144 rd:262144)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# sweep NP LABEL REP [ENV...]: one sweep to $tmp/LABEL.npNP.REP, rank 0's log beside.
sweep() {
  local np=$1 label=$2 r=$3; shift 3
  { "${rt[@]}" env "$@" mpirun "${flags[@]}" -np "$np" -x ACCORD_ALGO -x ACCORD_CHUNK_BYTES -x ACCORD_TUNE_FILE \
      -x ACCORD_LOG "$prog" -b 8 -e 256K -f 4 -n 200 -w 20 -c 1
    "${rt[@]}" env "$@" mpirun "${flags[@]}" -np "$np" -x ACCORD_ALGO -x ACCORD_CHUNK_BYTES -x ACCORD_TUNE_FILE \
      -x ACCORD_LOG "$prog" -b 1M -e 256M -f 4 -n 10 -w 2 -c 1
  } > "$tmp/$label.np$np.$r" 2> "$tmp/$label.np$np.$r.log"
}

# Runs are interleaved (every candidate once, then again) so that a change in the machine's
# load during the calibration falls on all candidates alike.
measure_all() {  # phase [auto]
  local np v r
  for r in $(seq "$reps"); do
    for np in $ranks; do
      echo "  $1 run $r/$reps: $np ranks" >&2
      for v in "${variants[@]}"; do
        sweep "$np" "$1-${v/:/-}" "$r" ACCORD_ALGO="${v%%:*}" ACCORD_CHUNK_BYTES="${v##*:}" ACCORD_TUNE_FILE= \
          ACCORD_LOG=warn
      done
      if [ "${2:-}" = auto ]; then
        sweep "$np" auto "$r" ACCORD_ALGO= ACCORD_CHUNK_BYTES=0 ACCORD_TUNE_FILE="$(realpath "$out")" \
          ACCORD_LOG=warn,tune:info
      fi
    done
  done
}

echo "calibrating: ${#variants[@]} candidates x ranks {$ranks} x $reps runs" >&2
measure_all cal
python3 - "$tmp" "$out" "$ranks" "$(hostname)" <<'PY'
import glob, os, re, statistics, sys, time
tmp, out, ranks, host = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4]
lines = ["accord-tune 1",
         f"# written by bench/calibrate.sh on {host} at {time.strftime('%Y-%m-%d %H:%M')}: median of out-of-place and in-place times",
         "# all_reduce NRANKS ALGO CHUNK_BYTES BYTES TIME_US"]
for path in sorted(glob.glob(f"{tmp}/cal-*.np*.1")):
    m = re.match(r"cal-(\w+)-(\d+)\.np(\d+)\.1$", os.path.basename(path))
    algo, chunk, np_ = m.groups()
    times = {}
    for rep in glob.glob(path[:-2] + ".*"):
        if rep.endswith(".log"): continue
        for line in open(rep):
            f = line.split()
            if not f or line.startswith("#"): continue
            if f[8] != "0": sys.exit(f"calibrate.sh: {algo} on {np_} ranks gave wrong results at {f[0]} bytes")
            times.setdefault(int(f[0]), []).extend([float(f[5]), float(f[9])])
    for size in sorted(times):
        lines.append(f"all_reduce {np_} {algo} {chunk} {size} {statistics.median(times[size]):.3f}")
open(out, "w").write("\n".join(lines) + "\n")
print(f"wrote {out} ({len(lines) - 3} measurements)", file=sys.stderr)
PY
[ "$check" = 1 ] || exit 0

echo "checking the tuner's picks with ACCORD_TUNE_FILE=$out" >&2
measure_all chk auto
python3 - "$tmp" "$ranks" "$reps" "${variants[@]}" <<'PY'
import glob, re, statistics, sys
tmp, ranks, reps, variants = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4:]
def name(v):
    a, c = v.split(":")
    return a if c == "262144" else f"{a}/{int(c) >> 10}K"
def medians(pattern):
    times = {}
    for rep in glob.glob(pattern):
        if rep.endswith(".log"): continue
        for line in open(rep):
            f = line.split()
            if f and not line.startswith("#"): times.setdefault(int(f[0]), []).extend([float(f[5]), float(f[9])])
    return {s: statistics.median(t) for s, t in times.items()}
def label(size):
    return f"{size} B" if size < 1024 else (f"{size >> 10} KiB" if size < 1 << 20 else f"{size >> 20} MiB")
worst = 0.0
for np_ in ranks:
    t = {name(v): medians(f"{tmp}/chk-{v.replace(':', '-')}.np{np_}.*") for v in variants}
    auto = medians(f"{tmp}/auto.np{np_}.*")
    picks = {}
    for log in glob.glob(f"{tmp}/auto.np{np_}.*.log"):
        for line in open(log):
            m = re.search(r"r0/\d+\] INFO tune all_reduce of (\d+) bytes \(\d+ ranks\): (\w+), chunk (\d+) KiB", line)
            if m:
                size, algo, kib = int(m.group(1)), m.group(2), int(m.group(3))
                picks[size] = algo if kib == 256 else f"{algo}/{kib}K"
    print(f"\n{np_} ranks, float32 sum, time in us, median of out-of-place and in-place over {reps} runs per column\n")
    names = [name(v) for v in variants]
    print("| size | " + " | ".join(names) + " | tuner's pick | pick / fastest | tuner (measured) |")
    print("|---:|" + "---:|" * len(names) + ":---|---:|---:|")
    for size in sorted(auto):
        row = [t[n].get(size) for n in names]
        fastest = min(x for x in row if x is not None)
        pick = picks.get(size, "?")
        ratio = t[pick][size] / fastest if pick in t and size in t[pick] else float("nan")
        worst = max(worst, ratio) if ratio == ratio else float("inf")
        cells = [f"**{x:.2f}**" if x == fastest else f"{x:.2f}" for x in row]
        print(f"| {label(size)} | " + " | ".join(cells) + f" | {pick} | {ratio:.2f} | {auto[size]:.2f} |")
print(f"\nworst pick / fastest: {worst:.2f} ({'within' if worst <= 1.10 else 'NOT within'} 10%)")
sys.exit(0 if worst <= 1.10 else 1)
PY
