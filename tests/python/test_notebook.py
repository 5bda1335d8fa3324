"""Execute docs/notebooks/quickstart.ipynb with nbclient; any failing cell fails the test.

The notebook's kernel is ``python3``. jupyter_client resolves it to ipykernel running under
this interpreter (``sys.executable``): the ``kernel.json`` that the ipykernel wheel installs
into the environment starts ``python``, which jupyter_client replaces with
``sys.executable``, and without any kernelspec it falls back to ipykernel's native kernel.
"""

from __future__ import annotations

import os
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "notebooks" / "quickstart.ipynb"
CELL_TIMEOUT = 180  # seconds per cell: the spawned worker imports numpy and ascend_ipc
STARTUP_TIMEOUT = 120


def _kernel_env() -> dict:
    """The kernel (and its spawned worker) must import the same ascend_ipc as this test."""
    import ascend_ipc

    env = dict(os.environ)
    pkg_parent = str(pathlib.Path(ascend_ipc.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # quiet a debugger warning in the kernel
    return env


def test_notebook_is_stored_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, "clear the notebook's outputs"


def test_quickstart_notebook_executes(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        startup_timeout=STARTUP_TIMEOUT,
        kernel_name=nb.metadata.get("kernelspec", {}).get("name", "python3"),
        resources={"metadata": {"path": str(tmp_path)}},  # the kernel's working directory
    )
    client.execute(env=_kernel_env())

    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code_cells), "a code cell did not run"
    text = "".join(
        out.get("text", "") for c in code_cells for out in c.outputs if out.get("output_type") == "stream"
    )
    assert "worker exit code: 0" in text
    assert "[1. 2. 3. 4. 5. 6. 7. 8.]" in text  # the kernel printed the worker's in-place writes
