"""The package on a kernel older than Linux 3.17 (CentOS 7's 3.10), simulated.

memfd_create and getrandom came with 3.17. A small launcher (built here with
cc) installs a seccomp filter that makes them fail with ENOSYS, as such a
kernel does, and runs Python under it: without getrandom the emulator falls
back to /dev/urandom and works; without memfd_create the import still
succeeds and each call that needs emulated memory fails with an AclError that
names the cause.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

LAUNCHER = r"""
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* argv[1]: the calls to fail ("memfd", "getrandom" or "both"); argv[2...]: the program. */
int main(int argc, char **argv) {
  if (argc < 3) return 2;
  int memfd = strcmp(argv[1], "getrandom") != 0, rnd = strcmp(argv[1], "memfd") != 0;
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, memfd ? SYS_memfd_create : 0xffffffffu, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, rnd ? SYS_getrandom : 0xffffffffu, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
  };
  struct sock_fprog prog = {sizeof f / sizeof f[0], f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    perror("seccomp");
    return 77;
  }
  execv(argv[2], argv + 2);
  perror("execv");
  return 1;
}
"""

CHILD = textwrap.dedent(
    """
    import json, multiprocessing as mp, numpy as np, ascend_ipc as aipc

    def write(h):
        with h.open() as b:
            np.from_dlpack(b)[:] = 5

    def attempt(f):
        try:
            f()
            return "ok"
        except aipc.AclError as e:
            return str(e)

    if __name__ == "__main__":
        out = {"provider": aipc.provider()}
        out["malloc"] = attempt(lambda: aipc.from_numpy(np.zeros(4, dtype=np.float32)))
        out["physical"] = attempt(lambda: aipc.PhysicalMemory(2 << 20))
        out["ipc_event"] = attempt(lambda: aipc.Event(ipc=True))
        if out["malloc"] == "ok":
            a = aipc.from_numpy(np.zeros(4, dtype=np.float32))
            p = mp.get_context("spawn").Process(target=write, args=(aipc.export(a),))
            p.start()
            p.join(60)
            out["shared"] = a.numpy().tolist() if p.exitcode == 0 else f"child exit {p.exitcode}"
        print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def launcher(tmp_path_factory) -> str:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc) to build the seccomp launcher")
    d = tmp_path_factory.mktemp("old_kernel")
    (d / "launcher.c").write_text(LAUNCHER)
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run([cc, "-O2", "-o", str(d / "launcher"), str(d / "launcher.c")], env=env,
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"cannot build the seccomp launcher: {r.stderr.strip()}")
    return str(d / "launcher")


def run_without(launcher: str, calls: str, tmp_path) -> dict:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, ASCEND_IPC_PROVIDER="emulated")
    r = subprocess.run([launcher, calls, sys.executable, str(script)], env=env, capture_output=True, text=True,
                       timeout=300)
    if r.returncode == 77:
        pytest.skip(f"seccomp filters are not allowed here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_without_getrandom_falls_back_to_urandom(launcher, tmp_path):
    out = run_without(launcher, "getrandom", tmp_path)
    assert out["malloc"] == out["physical"] == out["ipc_event"] == "ok", out
    assert out["shared"] == [5.0] * 4, out


def test_without_memfd_create_each_call_says_why(launcher, tmp_path):
    out = run_without(launcher, "both", tmp_path)
    assert out["provider"] == "emulated"
    for call in ("malloc", "physical", "ipc_event"):
        msg = out[call]
        assert "ACL_ERROR_RT_MEMORY_ALLOCATION" in msg, (call, msg)
        assert "memfd_create is not available" in msg and "Linux 3.17 or newer" in msg, (call, msg)
        assert "ASCEND_IPC_PROVIDER=cann" in msg, (call, msg)
