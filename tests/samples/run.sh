#!/usr/bin/env bash
# Builds and runs CANN's own sample programs, unchanged, against the emulator:
# the acceptance test that programs written against CANN's documentation run
# here as they do on an NPU.
#
#   tests/samples/run.sh EXAMPLE_DIR [SAMPLE ...]
#
# EXAMPLE_DIR is the example/ folder of CANN's runtime repository (not part of
# this project: fetch it yourself). SAMPLE is a path under it; by default every
# sample in tests/samples/samples.txt. Each sample is built and run by its own
# run.sh, in a scratch copy of EXAMPLE_DIR, against a CANN layout made of this
# project's headers and library (build/cann-emu: include/, lib64/ with
# libacl_rt.so and libascendcl.so, bin/setenv.bash) and an ascendc.cmake that
# builds host stand-ins (tests/samples/kernels/) in place of device kernels.
#
# A sample with run_server.sh and run_client.sh instead of run.sh (CANN's
# cross-server sample 12) runs between two emulated servers of one super-node
# (tests/supernode/servers.sh: two network namespaces joined by a veth pair):
# run_server.sh in the first, given the port on its standard input; once the
# server's UDP port is bound there, run_client.sh in the second, given the
# first's address and the port, in a copy of its own (each script builds in
# its folder). Where namespaces cannot be made (not root, no `ip`) such a
# sample is skipped with the reason.
#
# Settings: SAMPLE_TIMEOUT (seconds per sample, default 180); BUILD (default
# build); SAMPLE_PORT (the cross-server samples' port, default 8888). Each
# sample's output is in $BUILD/samples/logs/<sample>.log; the summary lists
# every sample with passed, skipped or FAILED and exits 1 if any failed.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
if [ $# -lt 1 ] || [ ! -d "$1" ]; then
  echo "usage: $0 EXAMPLE_DIR [SAMPLE ...]   (EXAMPLE_DIR: the example/ folder of CANN's runtime repository)" >&2
  exit 2
fi
examples="$(cd "$1" && pwd)"
shift
build="${root}/${BUILD:-build}"
timeout_s="${SAMPLE_TIMEOUT:-180}"

if [ $# -gt 0 ]; then
  samples=("$@")
else
  mapfile -t samples < <(grep -v '^\s*#' "${here}/samples.txt" | grep -v '^\s*$')
fi

make -s -C "${root}" lib || exit 1

# The CANN layout: what CANN's install has where its samples look for it.
cann="${build}/cann-emu"
rm -rf "${cann}"
mkdir -p "${cann}/lib64" "${cann}/bin" "${cann}/tools"
ln -s "${root}/csrc/include" "${cann}/include"
for name in libacl_rt.so libascendcl.so libacl_rt_impl.so; do
  ln -s "${build}/libascendcl_emu.so" "${cann}/lib64/${name}"
done
cp "${here}/cann/bin/setenv.bash" "${cann}/bin/"
cp -r "${here}/cann/tools/ascendc" "${cann}/tools/"

export ASCEND_HOME_PATH="${cann}" ASCEND_INSTALL_PATH="${cann}"
export ASCENDC_CMAKE_DIR="${cann}/tools/ascendc"
export ASCEND_IPC_KERNELS_DIR="${here}/kernels"
export SOC_VERSION="${SOC_VERSION:-Ascend910B1}"
export PATH LD_LIBRARY_PATH="${cann}/lib64${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"

# A scratch copy: samples write their build trees and outputs beside their sources.
work="${build}/samples"
rm -rf "${work}"
mkdir -p "${work}/logs"
cp -r "${examples}" "${work}/example"

servers="${root}/tests/supernode/servers.sh"
port="${SAMPLE_PORT:-8888}"
server_run=
# The servers of a cross-server sample go whatever happens (failure, Ctrl-C, TERM).
trap '[ -n "${server_run}" ] && bash "${servers}" down "${server_run}"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The server's UDP port is bound in namespace $1 (its /proc/net/udp lists it).
udp_bound() {
  local hex
  hex=$(printf ':%04X ' "$2")
  ip netns exec "$1" cat /proc/net/udp /proc/net/udp6 2>/dev/null | awk '{print $2" "}' | grep -q -- "${hex}"
}

# run_pair DIR LOG: run_server.sh in one server, run_client.sh in another; returns the
# first failure's status (124: timed out), 77: servers cannot be made (the reason in LOG).
run_pair() {
  local dir=$1 log=$2 client_dir="$1.client" desc srv_pid rc=0 crc=0 deadline
  desc=$(bash "${servers}" up 2 2>"${log}")
  rc=$?
  if [ ${rc} -ne 0 ]; then
    [ ${rc} -eq 3 ] && return 77
    return ${rc}
  fi
  local AIPC_RUN AIPC_SERVER_0 AIPC_SERVER_1 AIPC_ADDR_0 AIPC_SERVERS AIPC_ADDR_1
  eval "${desc}"
  server_run=${AIPC_RUN}
  rm -rf "${client_dir}"
  cp -r "${dir}" "${client_dir}"
  {
    echo "== servers: ${AIPC_SERVER_0} (${AIPC_ADDR_0}) runs run_server.sh, ${AIPC_SERVER_1} (${AIPC_ADDR_1}) run_client.sh"
    echo "== run_server.sh (port ${port})"
  } >>"${log}"
  (cd "${dir}" && printf '%s\n' "${port}" |
    timeout -k 10 "${timeout_s}" ip netns exec "${AIPC_SERVER_0}" bash -o pipefail ./run_server.sh) >"${log}.server" 2>&1 &
  srv_pid=$!
  # The client sends one datagram: it starts once the server listens (its build comes first).
  deadline=$((SECONDS + timeout_s))
  until udp_bound "${AIPC_SERVER_0}" "${port}"; do
    if ! kill -0 "${srv_pid}" 2>/dev/null || [ ${SECONDS} -ge ${deadline} ]; then
      break
    fi
    sleep 0.1
  done
  if udp_bound "${AIPC_SERVER_0}" "${port}"; then
    (cd "${client_dir}" && printf '%s\n%s\n' "${AIPC_ADDR_0}" "${port}" |
      timeout -k 10 "${timeout_s}" ip netns exec "${AIPC_SERVER_1}" bash -o pipefail ./run_client.sh) >"${log}.client" 2>&1
    crc=$?
  else
    echo "the server never bound UDP port ${port} in ${AIPC_SERVER_0}" >"${log}.client"
    crc=1
    kill -TERM "${srv_pid}" 2>/dev/null
  fi
  wait "${srv_pid}"
  rc=$?
  { cat "${log}.server"; echo "== run_client.sh (server ${AIPC_ADDR_0}, port ${port})"; cat "${log}.client"; } >>"${log}"
  rm -f "${log}.server" "${log}.client"
  bash "${servers}" down "${AIPC_RUN}"
  server_run=
  [ ${rc} -ne 0 ] && return ${rc}
  return ${crc}
}

passed=0
skipped=0
failed=()
for s in "${samples[@]}"; do
  s="${s#./}"
  dir="${work}/example/${s}"
  log="${work}/logs/$(echo "${s}" | tr '/' '_').log"
  t0=${SECONDS}
  if [ ! -f "${dir}/run.sh" ] && [ -f "${dir}/run_server.sh" ] && [ -f "${dir}/run_client.sh" ]; then
    run_pair "${dir}" "${log}"
    rc=$?
    if [ ${rc} -eq 77 ]; then
      echo "skipped ${s}: $(tail -1 "${log}")"
      skipped=$((skipped + 1))
      continue
    fi
  elif [ ! -f "${dir}/run.sh" ]; then
    echo "FAILED  ${s}: no run.sh in ${examples}/${s}"
    failed+=("${s}")
    continue
  else
    # pipefail: run scripts pipe the program into tee, which would hide its status.
    (cd "${dir}" && timeout -k 10 "${timeout_s}" bash -o pipefail ./run.sh) >"${log}" 2>&1
    rc=$?
  fi
  # A program that crashed or threw past main, whatever its script made of it.
  crash=$(grep -E -m1 "terminate called|Segmentation fault|core dumped|Aborted|AddressSanitizer|runtime error:" "${log}")
  [ ${rc} -eq 0 ] && [ -n "${crash}" ] && rc=134
  if [ ${rc} -eq 0 ]; then
    echo "passed  ${s} ($((SECONDS - t0)) s)"
    passed=$((passed + 1))
  else
    why="exit ${rc}"
    [ ${rc} -eq 124 ] && why="timed out after ${timeout_s} s"
    [ -n "${crash}" ] && why="${why}: ${crash}"
    echo "FAILED  ${s} (${why}; ${log}):"
    grep -E -i "error|fail|undefined|abort" "${log}" | head -5 | sed 's/^/          /'
    failed+=("${s}")
  fi
done
echo "${passed} passed, ${skipped} skipped, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]
