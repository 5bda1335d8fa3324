"""The project's DLPack declarations (csrc/python/dlpack_abi.h) against the dlpack.h of torch.

A small C program includes both headers and compares every struct size, every member
offset and every constant; it is compiled with the system C compiler at test time.
"""

import importlib.util
import pathlib
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = pathlib.Path(__file__).resolve().parents[2]
OURS = ROOT / "csrc" / "python" / "dlpack_abi.h"

# (our type, their type, [(our member, their member)])
STRUCTS = [
    ("aipc_DLPackVersion", "DLPackVersion", [("major", "major"), ("minor", "minor")]),
    ("aipc_DLDevice", "DLDevice", [("device_type", "device_type"), ("device_id", "device_id")]),
    ("aipc_DLDataType", "DLDataType", [("code", "code"), ("bits", "bits"), ("lanes", "lanes")]),
    (
        "aipc_DLTensor",
        "DLTensor",
        [(m, m) for m in ("data", "device", "ndim", "dtype", "shape", "strides", "byte_offset")],
    ),
    ("aipc_DLManagedTensor", "DLManagedTensor", [(m, m) for m in ("dl_tensor", "manager_ctx", "deleter")]),
    (
        "aipc_DLManagedTensorVersioned",
        "DLManagedTensorVersioned",
        [(m, m) for m in ("version", "manager_ctx", "deleter", "flags", "dl_tensor")],
    ),
]

CONSTANTS = [
    ("AIPC_DL_CPU", "kDLCPU"), ("AIPC_DL_CUDA", "kDLCUDA"), ("AIPC_DL_CUDA_HOST", "kDLCUDAHost"),
    ("AIPC_DL_OPENCL", "kDLOpenCL"), ("AIPC_DL_VULKAN", "kDLVulkan"), ("AIPC_DL_METAL", "kDLMetal"),
    ("AIPC_DL_VPI", "kDLVPI"), ("AIPC_DL_ROCM", "kDLROCM"), ("AIPC_DL_ROCM_HOST", "kDLROCMHost"),
    ("AIPC_DL_EXT_DEV", "kDLExtDev"), ("AIPC_DL_CUDA_MANAGED", "kDLCUDAManaged"), ("AIPC_DL_ONEAPI", "kDLOneAPI"),
    ("AIPC_DL_WEBGPU", "kDLWebGPU"), ("AIPC_DL_HEXAGON", "kDLHexagon"), ("AIPC_DL_MAIA", "kDLMAIA"),
    ("AIPC_DL_INT", "kDLInt"), ("AIPC_DL_UINT", "kDLUInt"), ("AIPC_DL_FLOAT", "kDLFloat"),
    ("AIPC_DL_OPAQUE_HANDLE", "kDLOpaqueHandle"), ("AIPC_DL_BFLOAT", "kDLBfloat"), ("AIPC_DL_COMPLEX", "kDLComplex"),
    ("AIPC_DL_BOOL", "kDLBool"),
    ("AIPC_DLPACK_MAJOR_VERSION", "DLPACK_MAJOR_VERSION"),
    ("AIPC_DLPACK_FLAG_BITMASK_READ_ONLY", "DLPACK_FLAG_BITMASK_READ_ONLY"),
    ("AIPC_DLPACK_FLAG_BITMASK_IS_COPIED", "DLPACK_FLAG_BITMASK_IS_COPIED"),
    ("AIPC_DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED", "DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED"),
]


def _torch_include():
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torch is not installed")
    inc = pathlib.Path(list(spec.submodule_search_locations)[0]) / "include"
    if not (inc / "ATen" / "dlpack.h").exists():
        pytest.skip("the torch wheel ships no ATen/dlpack.h")
    return inc


def _program():
    lines = [
        "#include <stddef.h>",
        "#include <stdio.h>",
        '#include "dlpack_abi.h"',
        '#include "ATen/dlpack.h"',
        "static int checks, fails;",
        "#define SAME(a, b) do { checks++; if ((unsigned long long)(a) != (unsigned long long)(b)) {"
        ' fails++; printf("MISMATCH %s = %llu vs %s = %llu\\n", #a, (unsigned long long)(a), #b,'
        " (unsigned long long)(b)); } } while (0)",
        "int main(void) {",
    ]
    for ours, theirs, members in STRUCTS:
        lines.append(f"  SAME(sizeof({ours}), sizeof({theirs}));")
        lines.append(f"  SAME(_Alignof({ours}), _Alignof({theirs}));")
        for om, tm in members:
            lines.append(f"  SAME(offsetof({ours}, {om}), offsetof({theirs}, {tm}));")
            lines.append(f"  SAME(sizeof((({ours} *)0)->{om}), sizeof((({theirs} *)0)->{tm}));")
    for ours, theirs in CONSTANTS:
        lines.append(f"  SAME({ours}, {theirs});")
    lines.append("  SAME(AIPC_DLPACK_MINOR_VERSION <= DLPACK_MINOR_VERSION, 1);")
    lines += ['  printf("checked %d, mismatched %d\\n", checks, fails);', "  return fails != 0;", "}"]
    return "\n".join(lines) + "\n"


def test_dlpack_abi_matches_torch(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    include = _torch_include()
    src = tmp_path / "abi.c"
    exe = tmp_path / "abi"
    src.write_text(_program())
    build = subprocess.run(
        [cc, "-std=c11", "-Wall", "-Werror", f"-I{OURS.parent}", f"-I{include}", str(src), "-o", str(exe)],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=10)
    assert run.returncode == 0, run.stdout + run.stderr
    expected = sum(2 + 2 * len(m) for _, _, m in STRUCTS) + len(CONSTANTS) + 1
    assert f"checked {expected}, mismatched 0" in run.stdout
