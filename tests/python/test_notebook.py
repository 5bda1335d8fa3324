"""Execute docs/notebooks/quickstart.ipynb with nbclient; any failing cell fails the test.

The notebook asks for the ``python3`` kernel. The test writes a ``python3`` kernelspec that
runs ipykernel under this interpreter (``sys.executable``) into a temporary directory and puts
it first on ``JUPYTER_PATH``, so the notebook runs in this environment even where the user has
a ``python3`` kernelspec of their own pointing at another interpreter; nothing outside the
temporary directory is written.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "notebooks" / "quickstart.ipynb"
CELL_TIMEOUT = 180  # seconds per cell: the spawned worker imports numpy and ascend_ipc
STARTUP_TIMEOUT = 120

# the conftest's (or pytest-timeout's) per-test limit; nbclient also times out each cell
pytestmark = pytest.mark.timeout(600)


def _kernel_env() -> dict:
    """The kernel (and its spawned worker) must import the same ascend_ipc as this test."""
    import ascend_ipc

    env = dict(os.environ)
    pkg_parent = str(pathlib.Path(ascend_ipc.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # quiet a debugger warning in the kernel
    return env


def _kernelspec_here(root: pathlib.Path, name: str) -> pathlib.Path:
    spec_dir = root / "kernels" / name
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python 3 ({sys.executable})",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    return root


def test_notebook_is_stored_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, "clear the notebook's outputs"


@pytest.mark.whole_program
def test_quickstart_notebook_executes(tmp_path, monkeypatch):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    kernel_name = nb.metadata.get("kernelspec", {}).get("name", "python3")
    jupyter_dir = _kernelspec_here(tmp_path / "jupyter", kernel_name)
    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join(p for p in (str(jupyter_dir), os.environ.get("JUPYTER_PATH")) if p))
    from jupyter_client.kernelspec import KernelSpecManager

    assert KernelSpecManager().get_kernel_spec(kernel_name).argv[0] == sys.executable
    workdir = tmp_path / "work"
    workdir.mkdir()
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        startup_timeout=STARTUP_TIMEOUT,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(workdir)}},  # the kernel's working directory
    )
    client.execute(env=_kernel_env())

    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code_cells), "a code cell did not run"
    text = "".join(
        out.get("text", "") for c in code_cells for out in c.outputs if out.get("output_type") == "stream"
    )
    assert "worker exit code: 0" in text
    assert "[1. 2. 3. 4. 5. 6. 7. 8.]" in text  # the kernel printed the worker's in-place writes
