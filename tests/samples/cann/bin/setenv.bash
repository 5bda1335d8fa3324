# setenv.bash of the emulator's CANN layout (tests/samples/run.sh makes it):
# programs built against it find the emulator's library.
_aipc_cann_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export ASCEND_HOME_PATH="${_aipc_cann_root}"
export LD_LIBRARY_PATH="${_aipc_cann_root}/lib64${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
unset _aipc_cann_root
