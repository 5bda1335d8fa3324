"""Emulated super-node servers (issue 24): the harness, and sharing between servers.

Servers are network namespaces made by tests/supernode/servers.sh (the ``supernode`` fixture,
supernode_servers.py); they share this machine's PID namespace and a rendezvous directory
(ASCEND_IPC_SUPERNODE_DIR). The hand-offs run tests/python/supernode_workers.py on both sides:
the receiver tells the exporter over TCP, through the servers' link, who it is (bare_tgid() and
its server's sdid), the exporter whitelists it on that server and sends the pickled handle back.

Everything skips, saying why, where namespaces cannot be made (not root, no `ip`, no veth).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
from supernode_servers import SCRIPT, netns_list, run_in

import ascend_ipc as aipc
from ascend_ipc import _C

pytestmark = pytest.mark.timeout(300)

HERE = pathlib.Path(__file__).resolve().parent
WORKERS = str(HERE / "supernode_workers.py")
PORT = 29517  # any port: each server is a network namespace of its own, fresh for the test


def _of_run(run):
    # Only this run's namespaces: other tests (and other CI lanes) make servers at the same time.
    return sorted(n for n in netns_list() if n.startswith(f"aipc-{run}-"))


def _run_of(server_name):
    return server_name[len("aipc-"):].rsplit("-", 1)[0]


def _last_json(out: str) -> dict:
    lines = [ln for ln in out.splitlines() if ln.lstrip().startswith("{")]
    assert lines, out
    return json.loads(lines[-1])


# --------------------------------------------------------------------------- the harness


def test_servers_are_namespaces_on_a_link(supernode):
    servers = supernode(n=2)
    assert len(servers) == 2 and servers[0].name != servers[1].name
    assert set(_of_run(servers.run)) == {s.name for s in servers}
    code = ("import os, socket, sys; print(os.readlink('/proc/self/ns/net'), os.readlink('/proc/self/ns/pid'), "
            "os.getpid(), flush=True)\n"
            "if sys.argv[1] == 'listen':\n"
            "    s = socket.create_server((os.environ['AIPC_ADDR'], 29518)); c, peer = s.accept(); "
            "c.sendall(peer[0].encode()); c.close()\n"
            "else:\n"
            "    import time\n"
            "    for _ in range(2400):\n"
            "        try: c = socket.create_connection((sys.argv[1], 29518), timeout=60); break\n"
            "        except ConnectionRefusedError: time.sleep(0.05)\n"
            "    print('peer says', c.recv(100).decode(), flush=True)\n")
    listener = servers[0].popen([sys.executable, "-c", code, "listen"], stdout=subprocess.PIPE, text=True)
    rc, out, err = run_in(servers[1], [sys.executable, "-c", code, servers[0].address])
    assert rc == 0, err
    lout, _ = listener.communicate(timeout=120)
    assert listener.returncode == 0
    net0, pid0, _ = lout.split()[:3]
    net1, pid1, _ = out.split()[:3]
    assert net0 != net1 and os.readlink("/proc/self/ns/net") not in (net0, net1)  # a namespace each
    assert pid0 == pid1 == os.readlink("/proc/self/ns/pid")  # one PID namespace for the super-node
    assert f"peer says {servers[1].address}" in out  # TCP over the link, from server 1's address


def test_script_run_removes_everything_when_a_command_fails():
    if subprocess.run(["bash", str(SCRIPT), "check"], capture_output=True).returncode != 0:
        pytest.skip("servers.sh check: servers cannot be made here")
    r = subprocess.run(["bash", str(SCRIPT), "run", "3", "--", "sh", "-c", "echo $AIPC_SERVER_INDEX $AIPC_ADDR_2 $AIPC_SERVER",
                        ";", "sh", "-c", "exit 7", ";", "true"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 7, r
    index, addr, name = r.stdout.split()[:3]
    assert index == "0" and addr.endswith(".3") and name.endswith("-0"), r
    assert _of_run(_run_of(name)) == []


def test_script_removes_everything_when_interrupted():
    if subprocess.run(["bash", str(SCRIPT), "check"], capture_output=True).returncode != 0:
        pytest.skip("servers.sh check: servers cannot be made here")
    # The commands say they are running; then the script is stopped as Ctrl-C or a CI timeout would.
    proc = subprocess.Popen(["bash", str(SCRIPT), "run", "2", "--", "sh", "-c", "echo up $AIPC_SERVER; exec sleep 600",
                             ";", "sh", "-c", "echo up $AIPC_SERVER; exec sleep 600"], stdout=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline().split(), proc.stdout.readline().split()]
        assert [ln[0] for ln in lines] == ["up", "up"], lines
        run = _run_of(lines[0][1])
        assert sorted(ln[1] for ln in lines) == _of_run(run)
        proc.terminate()
        assert proc.wait(timeout=120) == 143
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert _of_run(run) == []


def _as_nobody():
    os.setgid(65534)
    os.setgroups([])
    os.setuid(65534)


def test_script_refuses_clearly_where_servers_cannot_be_made(tmp_path):
    # No `ip` on the PATH.
    bash = "/bin/bash"
    r = subprocess.run([bash, str(SCRIPT), "up", "2"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PATH": str(tmp_path)})
    assert r.returncode == 3 and "cannot make servers here: no 'ip' command" in r.stderr, r
    if os.getuid() != 0:
        r = subprocess.run([bash, str(SCRIPT), "check"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 3 and "not root" in r.stderr, r
        return
    r = subprocess.run([bash, str(SCRIPT), "up", "2"], capture_output=True, text=True, timeout=60,
                       preexec_fn=_as_nobody)
    assert r.returncode == 3 and "cannot make servers here: not root" in r.stderr, r
    r = subprocess.run([bash, str(SCRIPT), "up", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "N must be 2..200" in r.stderr, r


def test_fixture_removes_the_servers_of_a_failing_test(tmp_path):
    if subprocess.run(["bash", str(SCRIPT), "check"], capture_output=True).returncode != 0:
        pytest.skip("servers.sh check: servers cannot be made here")
    inner = tmp_path / "test_inner.py"
    inner.write_text(
        "import subprocess, sys\n"
        "def test_fails(supernode):\n"
        "    servers = supernode(n=2)\n"
        "    p = servers[1].popen(['sleep', '600'])\n"
        "    print('RUN', servers.run, p.pid, flush=True)\n"
        "    assert False, 'on purpose'\n")
    (tmp_path / "conftest.py").write_text("pytest_plugins = ['supernode_servers']\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", str(inner)],
                       capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert r.returncode == 1 and "on purpose" in r.stdout, r.stdout + r.stderr
    run, pid = [ln.split()[1:] for ln in r.stdout.splitlines() if ln.startswith("RUN ")][0]
    assert _of_run(run) == []
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


# --------------------------------------------------------------------------- sharing across servers

def _need_supernode_core():
    if not hasattr(_C, "supernode_info"):
        pytest.skip("the C core has no super-node support (ascend_ipc._C.supernode_info is missing)")
    pytest.importorskip("torch", reason="the hand-offs share torch tensors; torch is not installed")


def _hand_off(supernode, kind, allow="receiver", receiver_env=None):
    """Runs both sides in two servers; returns (exporter's result, receiver's result, servers).
    allow: "receiver" (whitelisted), "other" (another process of its server is), "none"."""
    _need_supernode_core()
    servers = supernode(n=2)
    args = {"receiver": [], "other": ["--allow-other"], "none": ["--no-allow"]}[allow]
    exporter = servers[0].popen([sys.executable, WORKERS, "export", kind, str(PORT), *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rc, out, err = run_in(servers[1], [sys.executable, WORKERS, "receive", kind, servers[0].address, str(PORT)],
                          env=receiver_env, timeout=240)
    eout, eerr = exporter.communicate(timeout=240)
    assert exporter.returncode == 0, f"exporter:\n{eout}\n{eerr}\nreceiver:\n{out}\n{err}"
    assert rc == 0, f"receiver:\n{out}\n{err}\nexporter:\n{eout}\n{eerr}"
    return _last_json(eout), _last_json(out), servers


@pytest.mark.parametrize("kind", ["tensor", "state_dict"])
def test_share_across_servers(supernode, kind):
    exp, rec, servers = _hand_off(supernode, kind)
    # Two servers of one super-node: different sdids, one rendezvous, the receiver's pid as is.
    assert exp["me"]["sdid"] != rec["me"]["sdid"], (exp, rec)
    assert exp["me"]["info"]["supernode_id"] == rec["me"]["info"]["supernode_id"]
    assert exp["me"]["info"]["netns"] != rec["me"]["info"]["netns"]
    assert exp["peer"]["pid"] == rec["me"]["pid"] and exp["peer_address"] == servers[1].address
    assert "error" not in rec, rec
    assert rec["bytes_ok"] is True
    assert exp["saw_write"] is True  # the receiver's write, in the exporter's memory
    assert exp["closed"] == "closed"
    if kind == "state_dict":
        assert rec["parameter_kept"] is True
        assert rec["update_seen"] is True  # update() on the exporter's server, seen on the receiver's


@pytest.mark.parametrize("kind", ["tensor", "state_dict"])
def test_receiver_not_whitelisted_is_refused(supernode, kind):
    # The exporter whitelisted another process of the receiver's server, not the receiver.
    exp, rec, _ = _hand_off(supernode, kind, allow="other")
    assert "error" in rec, rec
    e = rec["error"]
    assert e["code"] == 207006 and e["name"] == "ACL_ERROR_RT_NO_PERMISSION", e
    assert f"process {rec['me']['pid']} of server {rec['me']['sdid']} is not on the whitelist" in e["message"], e
    assert exp["reply"] == rec


def test_exporter_that_offered_nothing_across_servers_is_not_reached(supernode):
    # No inter-server whitelist at all: the exporter never joined the super-node's rendezvous.
    exp, rec, _ = _hand_off(supernode, "tensor", allow="none")
    e = rec["error"]
    assert e["code"] == 207000 and "never offered anything across servers" in e["message"], e
    assert f"server {exp['me']['sdid']}" in e["message"], e
    assert exp["reply"] == rec


def test_receiver_of_another_supernode_is_refused(supernode, tmp_path):
    other = tmp_path / "other-supernode"
    other.mkdir(mode=0o700)
    exp, rec, _ = _hand_off(supernode, "tensor", receiver_env={"ASCEND_IPC_SUPERNODE_DIR": str(other)})
    assert rec["me"]["info"]["supernode_dir"] == str(other)
    assert rec["me"]["info"]["supernode_id"] != exp["me"]["info"]["supernode_id"]
    assert "error" in rec, rec
    assert "super-node" in rec["error"]["message"] or "supernode" in rec["error"]["message"], rec
    assert exp["reply"] == rec


def test_supernode_info_without_the_core_support(monkeypatch):
    monkeypatch.delattr(_C, "supernode_info", raising=False)
    monkeypatch.setenv("ASCEND_IPC_SDID", "0x9")
    assert aipc.supernode_info() == {"sdid": 9, "supernode_dir": None, "supernode_id": None,
                                     "netns": os.stat("/proc/self/ns/net").st_ino,
                                     "problem": "this build of the runtime has no super-nodes"}


def test_supernode_info_here():
    _need_supernode_core()
    info = aipc.supernode_info()
    assert set(info) >= {"sdid", "supernode_dir", "supernode_id", "netns"}
    assert isinstance(info["sdid"], int) and isinstance(info["supernode_dir"], str)
    assert info["problem"] == "" and info["supernode_id"], info  # the default directory is usable here
    assert info["netns"] == os.stat("/proc/self/ns/net").st_ino
    if "ASCEND_IPC_SDID" in os.environ:
        assert info["sdid"] == int(os.environ["ASCEND_IPC_SDID"], 0)


# --------------------------------------------------------------------------- Ray across servers


def _kill_matching(marker: str) -> None:
    """Kills (by pid) every process whose command line holds marker: the Ray daemons that
    `ray start` left running for this test, found by their temporary folder."""
    import signal

    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if marker.encode() in cmd:
            try:
                os.kill(int(name), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.timeout(900)
def test_ray_weight_sync_across_servers(supernode):
    """A Ray head node in one server, a worker node in another joined over the link; the trainer
    on the first, a rollout on each (supernode_ray.py)."""
    import importlib.util
    import secrets
    import shutil

    if os.environ.get("ASCEND_IPC_EXPECT_SANITIZED") == "1":
        pytest.skip("not under ASan: Ray's native workers would start under the LD_PRELOADed ASan runtime")
    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed for this Python (the `ray` extra)")
    _need_supernode_core()
    ray_cli = pathlib.Path(sys.executable).with_name("ray")
    if not ray_cli.exists():
        pytest.skip(f"no ray command beside {sys.executable}")
    servers = supernode(n=2)
    # Ray's nodes authenticate each other with a token of this test's own; temporary folders of
    # their own per node (short: Ray's Unix socket paths must fit 107 bytes).
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_ADDRESS": None, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": None}
    marker = f"/tmp/aipc-ray-{servers.run}-"
    head = f"{servers[0].address}:6379"
    common = ["--num-cpus", "1", "--disable-usage-stats",
              "--object-store-memory", str(100 << 20)]
    try:
        rc, out, err = run_in(servers[0], [str(ray_cli), "start", "--head", "--node-ip-address", servers[0].address,
                                           "--port", "6379", "--include-dashboard=false",
                                           "--resources", '{"server0": 1}',
                                           "--temp-dir", marker + "0", *common], env=env, timeout=300)
        assert rc == 0, f"ray start --head:\n{out}\n{err}"
        rc, out, err = run_in(servers[1], [str(ray_cli), "start", "--address", head, "--node-ip-address",
                                           servers[1].address, "--resources", '{"server1": 1}',
                                           "--temp-dir", marker + "1", *common], env=env, timeout=300)
        assert rc == 0, f"ray start --address {head}:\n{out}\n{err}"
        rc, out, err = run_in(servers[0], [sys.executable, str(HERE / "supernode_ray.py")],
                              env={**env, "RAY_ADDRESS": head}, timeout=400)
        assert rc == 0, f"driver:\n{out}\n{err}"
    finally:
        _kill_matching(marker)
        for i in (0, 1):
            shutil.rmtree(marker + str(i), ignore_errors=True)
    result = _last_json(out)
    trainer, (local, remote) = result["trainer"], result["rollouts"]
    assert local["netns"] == trainer["netns"] != remote["netns"], result
    assert local["sdid"] == trainer["sdid"] != remote["sdid"], result
    assert result["load_errors"] == [None, None], result
    assert result["matches"] == [[True, True]] * 3, result
