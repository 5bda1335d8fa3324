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
# Settings: SAMPLE_TIMEOUT (seconds per sample, default 180); BUILD (default
# build). Each sample's output is in $BUILD/samples/logs/<sample>.log; the
# summary lists every sample with passed or FAILED and exits 1 if any failed.
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

passed=0
failed=()
for s in "${samples[@]}"; do
  s="${s#./}"
  dir="${work}/example/${s}"
  log="${work}/logs/$(echo "${s}" | tr '/' '_').log"
  if [ ! -f "${dir}/run.sh" ]; then
    echo "FAILED  ${s}: no run.sh in ${examples}/${s}"
    failed+=("${s}")
    continue
  fi
  t0=${SECONDS}
  # pipefail: run scripts pipe the program into tee, which would hide its status.
  (cd "${dir}" && timeout -k 10 "${timeout_s}" bash -o pipefail ./run.sh) >"${log}" 2>&1
  rc=$?
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
echo "${passed} passed, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]
