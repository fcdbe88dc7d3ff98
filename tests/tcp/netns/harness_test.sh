#!/usr/bin/env bash
# Tests the multi-host harness (hosts.sh) and the TCP transport across it: three fake hosts,
# each with its own hostname and /dev/shm and no route off the 10.88.0.0/24 subnet; ping
# between them (when ping is installed); a 2-rank and a 3-rank TCP job whose ranks run on
# different hosts and pick the hosts' eth0 themselves; and a rate-limited link (tbf) that the
# job's bandwidth must respect. Skips (exit 77) when not root or without `ip netns`.
# Usage: harness_test.sh PATH/TO/tcp_hosts_prog
set -uo pipefail
prog=$(readlink -f "${1:?usage: $0 PATH/TO/tcp_hosts_prog}")
here=$(cd "$(dirname "$0")" && pwd)
. "$here/hosts.sh"
netns_check || exit 77

tag="t$(($$ % 10000000))"
trap 'netns_down "$tag"' EXIT
failures=0
pass() { echo "ok   - $*"; }
fail() { echo "FAIL - $*"; failures=$((failures + 1)); }
run() { timeout 25 "$here/hosts.sh" run "$tag" "$@"; }

netns_up "$tag" 3 || { echo "FAIL - could not create the hosts"; exit 1; }

# Identity and isolation.
names="$(run 0 hostname) $(run 1 hostname) $(run 2 hostname)"
[ "$names" = "$tag-h0 $tag-h1 $tag-h2" ] && pass "hostnames: $names" || fail "hostnames: '$names'"
[ "$(hostname)" != "$tag-h0" ] && pass "the machine keeps its own hostname" || fail "host name leaked out"
probe="accord-netns-probe-$$"
run 0 touch "/dev/shm/$probe"
if run 0 test -e "/dev/shm/$probe" && ! run 1 test -e "/dev/shm/$probe" && [ ! -e "/dev/shm/$probe" ]; then
  pass "each host has its own /dev/shm"
else
  fail "/dev/shm is shared between hosts"
fi
[ -z "$(run 0 ip route show default)" ] && pass "no default route: traffic cannot leave 10.88.0.0/24" \
  || fail "host 0 has a default route"

# Reachability.
if command -v ping >/dev/null 2>&1; then
  run 0 ping -c 2 -i 0.2 -W 1 "$(netns_addr 1)" >/dev/null && pass "ping h0 -> h1" || fail "ping h0 -> h1"
  run 2 ping -c 2 -i 0.2 -W 1 "$(netns_addr 0)" >/dev/null && pass "ping h2 -> h0" || fail "ping h2 -> h0"
else
  echo "note - ping is not installed (iputils-ping): reachability is shown by the TCP jobs below"
fi

secret=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
export ACCORD_SECRET="$secret"
store="$(netns_addr 0):29400"

# job NRANKS MIB [ENV...]: rank i on host i; prints the ranks' lines; fails unless all say ok.
job() {
  local n=$1 mib=$2 i rc=0 out
  shift 2
  out=$(mktemp)
  for ((i = 0; i < n; i++)); do
    env "$@" timeout 25 "$here/hosts.sh" run "$tag" "$i" \
      "$prog" --rank "$i" --nranks "$n" --store "$store" --mib "$mib" >>"$out" 2>&1 &
  done
  wait || rc=1
  for pid in $(jobs -p); do wait "$pid" || rc=1; done
  cat "$out"
  [ "$(grep -c ' ok$' "$out")" = "$n" ] || rc=1
  rm -f "$out"
  return $rc
}

out=$(job 2 64) && echo "$out" | grep -q "rank 1 host $tag-h1 if eth0 addr 10.88.0.2:" \
  && pass "2 ranks on 2 hosts over TCP (interface found through the route to the store)" \
  || fail "2-rank job: $out"
echo "$out" | sed 's/^/       /'

out=$(job 3 16 ACCORD_SOCKET_IFNAME=eth ACCORD_SOCKET_NSOCKS=3) && pass "3 ranks on 3 hosts, ACCORD_SOCKET_IFNAME=eth, 3 sockets" \
  || fail "3-rank job: $out"
echo "$out" | sed 's/^/       /'

# A 200 Mbit/s link on host 1: the job may not beat it (25 MiB each way takes >= 1 s).
netns_rate "$tag" 1 200mbit
out=$(job 2 24)
mbit=$(echo "$out" | sed -n 's/.*(\([0-9]*\) Mbit\/s sent).*/\1/p' | sort -n | tail -1)
if [ -n "$mbit" ] && [ "$mbit" -le 230 ] && [ "$mbit" -ge 50 ]; then
  pass "tbf at 200 Mbit/s holds the transport to $mbit Mbit/s"
else
  fail "rate-limited job: $out"
fi

netns_down "$tag"
[ -z "$(ip netns list | grep "^acc-$tag-")" ] && ! ip link show "acb-$tag" >/dev/null 2>&1 \
  && pass "teardown left nothing behind" || fail "teardown left namespaces or links"
trap - EXIT
[ $failures = 0 ] && echo "netns harness: all checks passed" || echo "netns harness: $failures check(s) failed"
exit $((failures > 0))
