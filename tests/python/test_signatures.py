"""Every function and method of ascend_ipc._C has a signature inspect can read.

The extension declares them with CPython's text-signature convention (a
docstring that starts with ``name($module_or_self, ...)\\n--\\n\\n``), so
``inspect.signature`` and ``help()`` show the parameters. The signatures must
also agree with the type stubs (_C.pyi) and with the API in SPEC §3.
"""

import ast
import inspect
import pathlib
import types

import pytest

import ascend_ipc
from ascend_ipc import _C

pytestmark = [pytest.mark.timeout(30), pytest.mark.python_only]

P = inspect.Parameter
DISALLOW_INSTANTIATION = 1 << 7  # Py_TPFLAGS_DISALLOW_INSTANTIATION
# What a type's own __dict__ holds for its PyMethodDef entries.
METHOD_DEF_KINDS = (types.MethodDescriptorType, types.ClassMethodDescriptorType, types.BuiltinFunctionType)


def _module_functions():
    return {n: f for n, f in vars(_C).items() if isinstance(f, types.BuiltinFunctionType)}


def _types():
    return {n: t for n, t in vars(_C).items() if isinstance(t, type) and not issubclass(t, BaseException)}


def _methods(tp):
    """The methods a type defines itself: PyMethodDef entries and slot wrappers."""
    return {n: m for n, m in vars(tp).items() if callable(m) and not isinstance(m, type)}


def _method_defs(tp):
    return {n: m for n, m in vars(tp).items() if isinstance(m, METHOD_DEF_KINDS) and n != "__new__"}


def test_walk_finds_the_api():
    # Guards the walk itself: an empty walk would pass everything below.
    assert {"empty", "zeros", "from_numpy", "export", "wrap", "mem_info", "_subview"} <= set(_module_functions())
    assert {"DeviceArray", "IpcHandle"} <= set(_types())
    assert {"numpy", "close", "__dlpack__", "__enter__", "__exit__", "__reduce__"} <= set(_method_defs(_C.DeviceArray))
    assert {"open", "allow", "close", "__reduce__"} <= set(_method_defs(_C.IpcHandle))


@pytest.mark.parametrize("name", sorted(_module_functions()))
def test_module_function_has_signature(name):
    fn = getattr(_C, name)
    assert fn.__text_signature__ is not None, f"{name}: no text signature in its docstring"
    assert fn.__text_signature__.startswith("($module"), fn.__text_signature__
    inspect.signature(fn)
    # The docstring proper remains once the signature is split off.
    assert fn.__doc__ and not fn.__doc__.startswith(name + "(")


@pytest.mark.parametrize(
    "tp, name",
    [(tp, n) for tp in sorted(_types()) for n in sorted(_methods(getattr(_C, tp)))],
)
def test_method_has_signature(tp, name):
    method = vars(getattr(_C, tp))[name]
    sig = inspect.signature(method)
    if isinstance(method, types.MethodDescriptorType):
        # $self: the unbound method takes the instance first, positionally.
        first = next(iter(sig.parameters.values()))
        assert first.name == "self" and first.kind is P.POSITIONAL_ONLY, (name, sig)
        assert method.__doc__, name


@pytest.mark.parametrize("tp", sorted(_types()))
def test_constructor_signature(tp):
    cls = getattr(_C, tp)
    if cls.__flags__ & DISALLOW_INSTANTIATION:
        with pytest.raises(TypeError):
            cls()
        return
    assert cls.__text_signature__ is not None, f"{tp}: tp_doc has no text signature"
    inspect.signature(cls)


# The documented signatures (SPEC §3, docs/python-api.md), written out.
DOCUMENTED = {
    "empty": "(shape, dtype='float32', device=None)",
    "zeros": "(shape, dtype='float32', device=None)",
    "from_numpy": "(array, device=None)",
    "export": "(array, pids=None, link=None, stream=None, *, torch_dtype=None, keepalive=None)",
    "wrap": "(address, size, device=None, owner=None)",
    "mem_info": "(device=None)",
    "set_device": "(device, /)",
    "provider": "()",
    "device_count": "()",
    "DeviceArray.__dlpack__": "(self, /, *, stream=None, max_version=None, dl_device=None, copy=None)",
    "DeviceArray.__dlpack_device__": "(self, /)",
    "DeviceArray.__array__": "(self, /, dtype=None, copy=None)",
    "DeviceArray.copy_from": "(self, /, src, stream=None)",
    "DeviceArray.numpy": "(self, /)",
    "IpcHandle": "(key, size, dtype='uint8', shape=None, strides=None, offset=0, device=0, pid=0, torch_dtype=None, "
    "event=None)",
    "Stream": "(device=None)",
    "Stream.wait": "(self, event, /)",
    "Event": "(ipc=False, timing=False, device=None)",
    "Event.record": "(self, /, stream=None)",
    "Event.synchronize": "(self, /, timeout=None)",
    "Event.elapsed": "(self, end, /)",
    "IpcHandle.open": "(self, /, device=None)",
    "IpcHandle.allow": "(self, /, *pids, sdid=None)",
}


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_documented_signature(name):
    obj = _C
    for part in name.split("."):
        obj = getattr(obj, part)
    assert str(inspect.signature(obj)) == DOCUMENTED[name]


def test_bound_method_signatures():
    a = ascend_ipc.empty(4)
    h = ascend_ipc.export(a)
    try:
        assert str(inspect.signature(a.__dlpack__)) == "(*, stream=None, max_version=None, dl_device=None, copy=None)"
        assert str(inspect.signature(a.__exit__)) == "(*exc_info)"
        assert str(inspect.signature(h.open)) == "(device=None)"
        assert str(inspect.signature(h.__enter__)) == "()"
    finally:
        h.close()
        a.close()


# ---- agreement with the type stubs ------------------------------------------


def _stub_params(fn):
    """[(name, kind, default)] of a stub FunctionDef; default is P.empty when there is none."""
    a = fn.args
    positional = [(x, P.POSITIONAL_ONLY) for x in a.posonlyargs] + [(x, P.POSITIONAL_OR_KEYWORD) for x in a.args]
    defaults = [P.empty] * (len(positional) - len(a.defaults)) + [ast.literal_eval(d) for d in a.defaults]
    out = [(x.arg, kind, d) for (x, kind), d in zip(positional, defaults)]
    if a.vararg:
        out.append((a.vararg.arg, P.VAR_POSITIONAL, P.empty))
    for x, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append((x.arg, P.KEYWORD_ONLY, P.empty if d is None else ast.literal_eval(d)))
    if a.kwarg:
        out.append((a.kwarg.arg, P.VAR_KEYWORD, P.empty))
    return out


def _runtime_params(obj):
    return [(p.name, p.kind, p.default) for p in inspect.signature(obj).parameters.values()]


def _stub_entries():
    """(name, stub FunctionDef) of every stub function, constructor and method
    that the extension declares itself (slots such as __len__ get their
    signatures from CPython, so they are left out)."""
    tree = ast.parse((pathlib.Path(ascend_ipc.__file__).parent / "_C.pyi").read_text())
    entries = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            entries.append((node.name, node))
        elif isinstance(node, ast.ClassDef) and node.name in _types():
            declared = _method_defs(getattr(_C, node.name))
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and (item.name in declared or item.name == "__new__"):
                    entries.append((f"{node.name}.{item.name}", item))
    return entries


def test_stub_entries_cover_the_api():
    names = {n for n, _ in _stub_entries()}
    assert {"empty", "export", "IpcHandle.__new__", "IpcHandle.open", "DeviceArray.__dlpack__"} <= names


@pytest.mark.parametrize("name, stub", _stub_entries(), ids=[n for n, _ in _stub_entries()])
def test_signature_matches_stub(name, stub):
    if name.endswith(".__new__"):
        runtime = _runtime_params(getattr(_C, name.split(".")[0]))
        expected = _stub_params(stub)[1:]  # cls
    elif "." in name:
        cls, meth = name.split(".")
        runtime = _runtime_params(vars(getattr(_C, cls))[meth])[1:]  # $self
        expected = _stub_params(stub)[1:]  # self
    else:
        runtime = _runtime_params(getattr(_C, name))
        expected = _stub_params(stub)
    assert runtime == expected
