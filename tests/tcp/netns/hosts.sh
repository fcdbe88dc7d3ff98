#!/usr/bin/env bash
# Fake hosts on one machine for multi-host tests. Each host is a network namespace joined to
# the others by a veth pair into one bridge, with its own hostname (UTS namespace) and its own
# /dev/shm (mount namespace), so ranks on different "hosts" cannot share memory and must use
# TCP, exactly as on real machines. Addresses are 10.88.0.<i+1>/24 on "eth0" inside the hosts
# only: the bridge has no address and the hosts have no default route, so no traffic can leave
# the namespaces or reach the machine's own network.
#
# Usage (root; every command is idempotent):
#   hosts.sh check              exit 0 if this machine can do it, else 77 (the skip code) and why
#   hosts.sh up TAG N [RATE]    make hosts TAG-h0 .. TAG-h(N-1); RATE (e.g. 500mbit) puts a
#                               token-bucket limit on every veth, both ways (no netem here)
#   hosts.sh run TAG I CMD...   run CMD on host I (same working directory and environment)
#   hosts.sh addr I             print host I's address
#   hosts.sh down TAG           remove every namespace, link and mount of TAG
# TAG: 1-8 letters/digits, unique per concurrent user. Scripts can instead source this file and
# call netns_check / netns_up / netns_run / netns_down (with `trap "netns_down TAG" EXIT`), and
# netns_write_agent for mpirun across the hosts.

NETNS_STATE=${NETNS_STATE:-/run/accord-netns}
NETNS_SUBNET=10.88.0

netns_addr() { echo "$NETNS_SUBNET.$(($1 + 1))"; }

netns_check() {
  if [ "$(id -u)" != 0 ]; then echo "SKIP: network namespaces need root"; return 77; fi
  local tool
  for tool in ip unshare nsenter mount; do
    command -v "$tool" >/dev/null 2>&1 || { echo "SKIP: '$tool' is not installed (iproute2, util-linux)"; return 77; }
  done
  local probe="acc-probe-$$"
  if ! ip netns add "$probe" 2>/dev/null; then echo "SKIP: 'ip netns add' is not permitted here"; return 77; fi
  if ! ip link add "acp$$" type veth peer name "acq$$" 2>/dev/null; then
    ip netns del "$probe"; echo "SKIP: this kernel cannot make veth pairs"; return 77
  fi
  ip link del "acp$$" 2>/dev/null
  ip netns del "$probe"
  return 0
}

netns_up() {
  local tag=$1 n=$2 rate=${3:-}
  [[ "$tag" =~ ^[A-Za-z0-9]{1,8}$ ]] || { echo "netns_up: TAG '$tag' must be 1-8 letters or digits" >&2; return 2; }
  netns_down "$tag"
  local dir="$NETNS_STATE/$tag" br="acb-$tag" i ns
  mkdir -p "$dir"
  # Persistent mount namespaces must be bound under a private mount.
  mount --bind "$dir" "$dir" && mount --make-private "$dir" || return 1
  ip link add "$br" type bridge || return 1
  # IPv4 on the hosts' subnet only: no IPv6 link-local chatter on these links either.
  echo 1 >"/proc/sys/net/ipv6/conf/$br/disable_ipv6" 2>/dev/null
  ip link set "$br" up
  for ((i = 0; i < n; i++)); do
    ns="acc-$tag-h$i"
    ip netns add "$ns" || return 1
    ip link add "acv-$tag-$i" type veth peer name "ace-$tag-$i" || return 1
    ip link set "acv-$tag-$i" master "$br"
    echo 1 >"/proc/sys/net/ipv6/conf/acv-$tag-$i/disable_ipv6" 2>/dev/null
    ip link set "acv-$tag-$i" up
    ip link set "ace-$tag-$i" netns "$ns"
    ip -n "$ns" link set "ace-$tag-$i" name eth0
    ip netns exec "$ns" sh -c 'echo 1 >/proc/sys/net/ipv6/conf/all/disable_ipv6' 2>/dev/null
    ip -n "$ns" addr add "$(netns_addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    touch "$dir/h$i.uts" "$dir/h$i.mnt"
    nsenter --net="/run/netns/$ns" unshare --uts="$dir/h$i.uts" --mount="$dir/h$i.mnt" --propagation private \
      sh -c "hostname $tag-h$i && mount -t tmpfs -o mode=1777 tmpfs /dev/shm" || return 1
    if [ -n "$rate" ]; then netns_rate "$tag" "$i" "$rate" || return 1; fi
  done
}

# Token bucket on host I's link, both directions. NETNS_BURST (default 256kb) is the bucket:
# it must hold at least rate / HZ, e.g. 2mb for 10gbit.
netns_rate() {
  local tag=$1 i=$2 rate=$3 burst=${NETNS_BURST:-256kb}
  tc qdisc replace dev "acv-$tag-$i" root tbf rate "$rate" burst "$burst" latency 50ms &&
    ip netns exec "acc-$tag-h$i" tc qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" latency 50ms
}

# Writes an executable launch agent for Open MPI (--mca plm_rsh_agent FILE) to FILE. Open MPI
# runs `AGENT [options] HOST COMMAND...` as it would ssh; HOST is a fake host's address. The
# agent goes back to the caller's mount namespace (where the hosts' namespace files are; the
# caller must outlive the job), enters that host and runs the command with a shell, as sshd
# would. mpirun itself runs on host 0 (netns_run TAG 0 mpirun ...), like on a cluster's node.
netns_write_agent() {
  local tag=$1 file=$2 self
  self=$(readlink -f "${BASH_SOURCE[0]}")
  cat >"$file" <<AGENT
#!/usr/bin/env bash
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
i=\$(( \${host##*.} - 1 ))
exec nsenter --mount=/proc/$$/ns/mnt -- "$self" run "$tag" "\$i" sh -c "\$*"
AGENT
  chmod 700 "$file"
}

netns_run() {
  local tag=$1 i=$2
  shift 2
  local dir="$NETNS_STATE/$tag"
  nsenter --net="/run/netns/acc-$tag-h$i" --uts="$dir/h$i.uts" --mount="$dir/h$i.mnt" --wd="$PWD" -- "$@"
}

netns_down() {
  local tag=$1 dir="$NETNS_STATE/$1" ns pid f
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^acc-$tag-h[0-9]*$"); do
    # Processes this harness started inside the host (by id, from the kernel's own list).
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  ip link del "acb-$tag" 2>/dev/null
  if [ -d "$dir" ]; then
    for f in "$dir"/*.uts "$dir"/*.mnt; do [ -e "$f" ] && umount "$f" 2>/dev/null; done
    umount "$dir" 2>/dev/null
    rm -rf "$dir"
  fi
  return 0
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  cmd=${1:-}
  shift || true
  case "$cmd" in
    check) netns_check ;;
    up) [ $# -ge 2 ] || { echo "usage: $0 up TAG N [RATE]" >&2; exit 2; }; netns_up "$@" ;;
    run) [ $# -ge 3 ] || { echo "usage: $0 run TAG I CMD..." >&2; exit 2; }; netns_run "$@" ;;
    addr) netns_addr "$1" ;;
    down) [ $# -ge 1 ] || { echo "usage: $0 down TAG" >&2; exit 2; }; netns_down "$1" ;;
    *) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
fi
