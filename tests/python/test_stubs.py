"""The type stubs and py.typed ship with the package and match the extension."""

import ast
import inspect
import pathlib

import pytest

import ascend_ipc
from ascend_ipc import _C

pytestmark = [pytest.mark.timeout(30), pytest.mark.python_only]

PKG = pathlib.Path(ascend_ipc.__file__).parent


def _stub():
    return ast.parse((PKG / "_C.pyi").read_text())


def test_py_typed_and_stub_present():
    assert (PKG / "py.typed").exists()
    assert (PKG / "_C.pyi").exists()


def test_stub_names_match_module():
    tree = _stub()
    stub_names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            stub_names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            stub_names.add(node.target.id)
    runtime = {n for n in dir(_C) if not n.startswith("__")}
    private_aliases = {n for n in stub_names if n.startswith("_") and n[1].isupper()}  # _Shape, _Link
    assert stub_names - private_aliases == runtime


@pytest.mark.parametrize("cls", ["DeviceArray", "IpcHandle", "AclError"])
def test_stub_members_match_classes(cls):
    node = next(n for n in _stub().body if isinstance(n, ast.ClassDef) and n.name == cls)
    stub_members = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    stub_members |= {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
    runtime_type = getattr(_C, cls)
    if cls == "AclError":
        assert stub_members == {"code", "name", "message", "call"}
        return
    runtime = {n for n, _ in inspect.getmembers(runtime_type) if not n.startswith("__")}
    runtime |= {n for n in ("__array__", "__enter__", "__exit__", "__getitem__", "__len__", "__dlpack__", "__dlpack_device__",
                            "__reduce__", "__eq__", "__hash__", "__new__") if n in vars(runtime_type)}
    if cls == "IpcHandle":
        runtime.add("__new__")
    assert stub_members == runtime
