#!/usr/bin/env bash
# Emulated servers of one super-node on this machine: each server is a network namespace, joined
# to the others by veth links with addresses, all sharing this machine's PID namespace and
# filesystem (so ASCEND_IPC_SUPERNODE_DIR, the super-node's rendezvous, reaches every server).
#
#   servers.sh check
#       exit 0 if servers can be made here; else exit 3 with the reason on stderr.
#   servers.sh up N
#       makes N >= 2 servers and prints shell-readable lines (eval them):
#         AIPC_RUN=<run>  AIPC_SERVERS=N  AIPC_SERVER_<i>=<netns name>  AIPC_ADDR_<i>=<IPv4>
#       The servers stay until `servers.sh down <run>`.
#   servers.sh exec NAME -- CMD [ARG...]
#       runs CMD in server NAME (ip netns exec), with this environment.
#   servers.sh down RUN
#       removes every namespace and link of RUN (processes still inside one keep it alive
#       until they exit, but its name and links go at once).
#   servers.sh run N -- CMD0 [ARG...] [';' CMD1 [ARG...] ...]
#       up N, then each CMD<i> in server i, all at once; waits for all, then down, also when
#       a command fails or this script is interrupted. Each command gets AIPC_SERVER_INDEX,
#       AIPC_SERVER (its namespace), AIPC_ADDR (its address) and every AIPC_ADDR_<i>. Exit
#       status: the first non-zero one of the commands, in server order, else 0.
#
# Two servers are one veth pair; three or more hang off a bridge in a namespace of the run's
# own (aipc-<run>-br). Each server has its loopback up and one interface, aipc0, with
# 10.<a>.<b>.<i+1>/24, <a>.<b> taken from the run id. The links exist only inside the run's
# namespaces (no route to the host or to another run), so runs side by side never collide.
# Names: aipc-<run>-<i>, run = this script's pid (plus a random suffix if that name is taken).
#
# Exit status 3: servers cannot be made here (not root, no `ip`, no network namespaces, no veth
# or bridge in the kernel); the message on stderr says which, for callers to skip with.
# Exit status 2: bad usage.
set -euo pipefail

PROG=servers.sh
CANNOT=3

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
}

die_usage() {
  echo "${PROG}: $* (${PROG} --help)" >&2
  exit 2
}

cannot() {
  echo "${PROG}: cannot make servers here: $*" >&2
  exit ${CANNOT}
}

valid_run() {
  [[ "$1" =~ ^[0-9]+(x[0-9]+)?$ ]]
}

# The reasons a namespace cannot be made, tested in the order a user fixes them.
preflight() {
  command -v ip >/dev/null 2>&1 || cannot "no 'ip' command (install iproute2)"
  [ "$(id -u)" = 0 ] || cannot "not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN; run as root)"
  [ -e /proc/self/ns/net ] || cannot "the kernel has no network namespaces (/proc/self/ns/net is missing)"
}

# Removes what `up` made for RUN; quiet and idempotent.
down() {
  local run=$1 ns
  valid_run "${run}" || die_usage "not a run id: ${run}"
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    case "${ns}" in
      aipc-"${run}"-*) ip netns del "${ns}" 2>/dev/null || true ;;
    esac
  done
}

# A run id of this process whose names are free.
pick_run() {
  local run=$$
  while [ -e "/run/netns/aipc-${run}-0" ] || [ -e "/run/netns/aipc-${run}-br" ]; do
    run="$$x${RANDOM}"
  done
  echo "${run}"
}

check_n() {
  [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge 2 ] && [ "$1" -le 200 ] || die_usage "N must be 2..200, not '$1'"
}

# up N RUN: makes the servers; prints their description; on any failure or signal removes what
# it made (the caller's traps must already cover RUN when it runs this in a subshell).
up() {
  local n=$1 run=$2 i a b ns br err
  a=$(( ($$ / 256) % 256 ))
  b=$(( $$ % 256 ))
  UP_RUN=${run}
  trap 'rc=$?; [ -n "${UP_RUN:-}" ] && down "${UP_RUN}"; exit $rc' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  for ((i = 0; i < n; i++)); do
    ns="aipc-${run}-${i}"
    err=$(ip netns add "${ns}" 2>&1) || cannot "ip netns add failed: ${err}"
    ip -n "${ns}" link set lo up
  done
  if [ "${n}" -eq 2 ]; then
    err=$(ip link add name aipc0 netns "aipc-${run}-0" type veth peer name aipc0 netns "aipc-${run}-1" 2>&1) ||
      cannot "no veth link (modprobe veth): ${err}"
  else
    br="aipc-${run}-br"
    ip netns add "${br}"
    ip -n "${br}" link set lo up
    err=$(ip -n "${br}" link add name br0 type bridge 2>&1) || cannot "no bridge (modprobe bridge): ${err}"
    ip -n "${br}" link set br0 up
    for ((i = 0; i < n; i++)); do
      err=$(ip link add name "p${i}" netns "${br}" type veth peer name aipc0 netns "aipc-${run}-${i}" 2>&1) ||
        cannot "no veth link (modprobe veth): ${err}"
      ip -n "${br}" link set "p${i}" master br0
      ip -n "${br}" link set "p${i}" up
    done
  fi
  for ((i = 0; i < n; i++)); do
    ns="aipc-${run}-${i}"
    ip -n "${ns}" addr add "10.${a}.${b}.$((i + 1))/24" dev aipc0
    ip -n "${ns}" link set aipc0 up
  done
  trap - EXIT INT TERM
  UP_RUN=
  echo "AIPC_RUN=${run}"
  echo "AIPC_SERVERS=${n}"
  for ((i = 0; i < n; i++)); do
    echo "AIPC_SERVER_${i}=aipc-${run}-${i}"
    echo "AIPC_ADDR_${i}=10.${a}.${b}.$((i + 1))"
  done
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "${cmd}" in
  check)
    [ $# -eq 0 ] || die_usage "check takes no arguments"
    # A real attempt: what fails is what a test would meet.
    preflight
    run=$(pick_run)
    trap 'rc=$?; down "${run}"; exit $rc' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    (up 2 "${run}" >/dev/null)
    ;;
  up)
    [ $# -eq 1 ] || die_usage "up takes N"
    check_n "$1"
    preflight
    up "$1" "$(pick_run)"
    ;;
  down)
    [ $# -eq 1 ] || die_usage "down takes a run id"
    down "$1"
    ;;
  exec)
    [ $# -ge 3 ] && [ "$2" = "--" ] || die_usage "exec NAME -- CMD [ARG...]"
    name=$1
    shift 2
    [ -e "/run/netns/${name}" ] || { echo "${PROG}: no server ${name}" >&2; exit 2; }
    exec ip netns exec "${name}" "$@"
    ;;
  run)
    [ $# -ge 3 ] && [ "$2" = "--" ] || die_usage "run N -- CMD0 [ARG...] [';' CMD1 ...]"
    n=$1
    shift 2
    check_n "${n}"
    preflight
    run=$(pick_run)
    pids=()
    # Whatever happens from here on, the servers go: on exit, on Ctrl-C, on TERM (a signal
    # that comes while `up` runs is handled once it returns, and the trap removes them).
    cleanup() {
      local p
      for p in "${pids[@]}"; do kill -TERM "${p}" 2>/dev/null || true; done
      for p in "${pids[@]}"; do wait "${p}" 2>/dev/null || true; done
      down "${run}"
    }
    trap 'rc=$?; cleanup; exit $rc' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    desc=$(up "${n}" "${run}")
    eval "${desc}"
    for ((i = 0; i < AIPC_SERVERS; i++)); do export "AIPC_ADDR_${i}"; done
    i=0
    argv=()
    start() {
      [ ${#argv[@]} -gt 0 ] || die_usage "server $1 has no command"
      [ "$1" -lt "${AIPC_SERVERS}" ] || die_usage "more commands than servers (${AIPC_SERVERS})"
      local name_var="AIPC_SERVER_$1" addr_var="AIPC_ADDR_$1"
      AIPC_SERVER_INDEX=$1 AIPC_SERVER=${!name_var} AIPC_ADDR=${!addr_var} \
        ip netns exec "${!name_var}" "${argv[@]}" &
      pids+=($!)
    }
    for arg in "$@"; do
      if [ "${arg}" = ";" ]; then
        start "${i}"
        i=$((i + 1))
        argv=()
      else
        argv+=("${arg}")
      fi
    done
    start "${i}"
    rc=0
    for p in "${pids[@]}"; do
      st=0
      wait "${p}" || st=$?
      [ ${rc} -eq 0 ] && rc=${st}
    done
    pids=()
    exit ${rc}
    ;;
  -h | --help | help)
    usage
    ;;
  "")
    die_usage "a command is needed"
    ;;
  *)
    die_usage "unknown command: ${cmd}"
    ;;
esac
