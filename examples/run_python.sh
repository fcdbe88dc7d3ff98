#!/usr/bin/env bash
# Runs examples/python_ctypes.py as NP processes with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT.
# Usage: run_python.sh NP LIBACCORD_PATH SCRIPT
set -u
py=${PYTHON:-/usr/bin/python3}
"$py" -c "import numpy" 2>/dev/null || { echo "SKIP: $py has no numpy (apt-get install python3-numpy)"; exit 77; }
np=$1; lib=$2; script=$3
# A port the kernel hands out as free (one derived from the pid may be another program's).
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pids=()
for r in $(seq 0 $((np - 1))); do
  RANK=$r WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 MASTER_PORT=$port ACCORD_LIB=$lib "${PYTHON:-/usr/bin/python3}" "$script" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
