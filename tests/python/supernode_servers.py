"""pytest plugin: the ``supernode`` fixture, emulated servers of one super-node (issue 24).

Loaded by ``tests/python/conftest.py``. ``supernode(n=2)`` brings up ``n`` servers with
``tests/supernode/servers.sh up`` -- network namespaces joined by veth links, sharing this
machine's PID namespace and filesystem -- and returns them as a list of :class:`Server`
(``name``: the namespace, ``address``: its IPv4 address on the link, ``index``). Each call
makes a super-node of its own: its servers get an ``ASCEND_IPC_SUPERNODE_DIR`` (the
rendezvous, mode 0700) under the test's temporary folder, unless ``supernode_dir=`` names one.

``server.popen(argv, env=None, **kwargs)`` starts a process in that server
(``ip netns exec``) with this environment plus ``env``, the package under test and this
folder on ``PYTHONPATH`` (as the other multi-process tests run ``sys.executable``), and its own
process group. At the end of the test every process started so is killed (its whole group)
and reaped, and every server is removed (``servers.sh down``), whether the test passed,
failed or was interrupted.

Where servers cannot be made (not root, no ``ip``, no veth), the test is skipped with the
script's reason.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
from typing import Dict, List, Optional, Sequence

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCRIPT = ROOT / "tests" / "supernode" / "servers.sh"
CANNOT = 3  # servers.sh: servers cannot be made here


def _package_home() -> pathlib.Path:
    import ascend_ipc

    return pathlib.Path(ascend_ipc.__file__).resolve().parents[1]


def netns_list() -> List[str]:
    """The names ``ip netns list`` shows (empty where there is no ``ip``)."""
    try:
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.split()[0] for line in out.splitlines() if line.strip()]


class Server:
    """One emulated server: a network namespace with an address."""

    def __init__(self, node: "SuperNode", index: int, name: str, address: str) -> None:
        self.node, self.index, self.name, self.address = node, index, name, address

    def env(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        env = dict(os.environ)
        path = [str(_package_home()), str(HERE)]
        if env.get("PYTHONPATH"):
            path.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(path)
        env["ASCEND_IPC_SUPERNODE_DIR"] = self.node.supernode_dir
        env.update({"AIPC_SERVER": self.name, "AIPC_SERVER_INDEX": str(self.index), "AIPC_ADDR": self.address})
        for k, v in (extra or {}).items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        return env

    def popen(self, argv: Sequence[str], env: Optional[Dict[str, str]] = None, **kwargs) -> subprocess.Popen:
        """Starts argv in this server; env adds to (None values remove from) this environment."""
        kwargs.setdefault("start_new_session", True)
        proc = subprocess.Popen(["ip", "netns", "exec", self.name, *argv], env=self.env(env), **kwargs)
        self.node.factory.procs.append(proc)
        return proc

    def __repr__(self) -> str:
        return f"Server({self.index}, {self.name!r}, {self.address!r})"


class SuperNode(list):
    """The servers of one ``supernode()`` call (a list of Server), with its run id."""

    def __init__(self, factory: "SupernodeFactory", run: str, supernode_dir: str) -> None:
        super().__init__()
        self.factory, self.run, self.supernode_dir = factory, run, supernode_dir


class SupernodeFactory:
    def __init__(self, tmp_path_factory) -> None:
        self._tmp = tmp_path_factory
        self.nodes: List[SuperNode] = []
        self.procs: List[subprocess.Popen] = []

    def __call__(self, n: int = 2, supernode_dir: Optional[str] = None) -> SuperNode:
        r = subprocess.run(["bash", str(SCRIPT), "up", str(n)], capture_output=True, text=True, timeout=120)
        if r.returncode == CANNOT:
            pytest.skip(r.stderr.strip() or "servers.sh: cannot make servers here")
        if r.returncode != 0:
            pytest.fail(f"servers.sh up {n} failed (exit {r.returncode}):\n{r.stdout}{r.stderr}")
        desc = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
        if supernode_dir is None:
            d = self._tmp.mktemp("supernode")
            os.chmod(d, 0o700)
            supernode_dir = str(d)
        node = SuperNode(self, desc["AIPC_RUN"], supernode_dir)
        self.nodes.append(node)  # before anything can fail: close() removes it
        for i in range(int(desc["AIPC_SERVERS"])):
            node.append(Server(node, i, desc[f"AIPC_SERVER_{i}"], desc[f"AIPC_ADDR_{i}"]))
        return node

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:  # pragma: no cover
                proc.kill()
                proc.wait()
            for f in (proc.stdin, proc.stdout, proc.stderr):
                if f is not None:
                    f.close()
        self.procs.clear()
        for node in self.nodes:
            subprocess.run(["bash", str(SCRIPT), "down", node.run], capture_output=True, timeout=120)
        self.nodes.clear()


@pytest.fixture
def supernode(tmp_path_factory):
    factory = SupernodeFactory(tmp_path_factory)
    try:
        yield factory
    finally:
        factory.close()


def run_in(server: Server, argv: Sequence[str], env=None, timeout: float = 120):
    """Runs argv in server to its end: (rc, stdout, stderr); fails the test on timeout."""
    proc = server.popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{argv} in {server.name} timed out after {timeout} s\nstdout:\n{out}\nstderr:\n{err}")
    return proc.returncode, out, err


__all__ = ["Server", "SuperNode", "SupernodeFactory", "netns_list", "run_in", "supernode", "SCRIPT"]
