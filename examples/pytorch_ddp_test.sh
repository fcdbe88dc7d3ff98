#!/usr/bin/env bash
# The suite's checks of examples/pytorch_ddp.py and examples/torch_p2p.py (PyTorch is not
# installed by setup.sh: its wheel is gigabytes):
#   pytorch_ddp_test.sh compile   the examples and scripts/compare_losses.py compile, and the
#                                 comparison says equal, different and incomparable rightly
#   pytorch_ddp_test.sh run       where torch imports: 1 and 2 processes on the CPU over Gloo,
#                                 a few steps, the 2-process losses equal on a second run; and
#                                 torch_p2p.py on 2 and 3 processes over Gloo (exact);
#                                 exit 77 (meson: SKIP) without torch
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PYTHONPYCACHEPREFIX=$tmp/pycache  # nothing written beside the sources
compare=$src/scripts/compare_losses.py

case ${1:-} in
  compile)
    python3 -m py_compile "$src/examples/pytorch_ddp.py" "$src/examples/torch_p2p.py" "$compare"
    printf '# run a\n0 %s 1\n1 %s 0.5\n# ms a step: 1.5 over 2 steps\n' "$(python3 -c 'print((1.0).hex())')" \
      "$(python3 -c 'print((0.5).hex())')" >"$tmp/a.rank0"
    cp "$tmp/a.rank0" "$tmp/same.rank0"
    sed 's/^1 .*/1 '"$(python3 -c 'print((0.5000001).hex())')"' 0.5000001/' "$tmp/a.rank0" >"$tmp/near.rank0"
    head -n 2 "$tmp/a.rank0" >"$tmp/short.rank0"
    rc() { set +e; python3 "$compare" "$@" >"$tmp/out" 2>&1; echo $?; set -e; }
    [ "$(rc "$tmp/a.rank0" "$tmp/same.rank0")" = 0 ] || { cat "$tmp/out"; exit 1; }
    [ "$(rc "$tmp/a.rank0" "$tmp/near.rank0")" = 1 ] || { cat "$tmp/out"; exit 1; }
    grep -q "DIFFERENT: first at step 1" "$tmp/out" || { cat "$tmp/out"; exit 1; }
    [ "$(rc "$tmp/a.rank0" "$tmp/near.rank0" --tolerance 1e-6)" = 0 ] || { cat "$tmp/out"; exit 1; }
    [ "$(rc "$tmp/a.rank0" "$tmp/short.rank0")" = 2 ] || { cat "$tmp/out"; exit 1; }
    [ "$(rc "$tmp/a.rank0" "$tmp/missing.rank0")" = 2 ] || { cat "$tmp/out"; exit 1; }
    echo "pytorch_ddp.py and compare_losses.py compile; the comparison tells equal, different and incomparable apart"
    ;;
  run)
    if ! python3 -c 'import torch' 2>/dev/null; then
      echo "SKIP: PyTorch does not import here (python3 -c 'import torch')"
      exit 77
    fi
    ddp=$src/examples/pytorch_ddp.py
    python3 "$ddp" --device cpu --backend gloo --steps 20 --warmup 2 --quiet --out "$tmp/one"
    for run in a b; do
      port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
      python3 -m torch.distributed.run --nproc-per-node 2 --master-port "$port" "$ddp" --device cpu \
        --backend gloo --steps 20 --warmup 2 --quiet --out "$tmp/two_$run"
    done
    for r in 0 1; do python3 "$compare" "$tmp/two_a.rank$r" "$tmp/two_b.rank$r"; done
    for np in 2 3; do
      port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
      python3 -m torch.distributed.run --nproc-per-node $np --master-port "$port" "$src/examples/torch_p2p.py" \
        --device cpu --backend gloo | tee "$tmp/p2p$np"
      grep -q "all results exact" "$tmp/p2p$np"
    done
    ;;
  *) echo "usage: $0 compile|run" >&2; exit 2 ;;
esac
