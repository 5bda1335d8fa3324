"""Build of the ascend_ipc extension (ascend_ipc._C).

The extension compiles the C core (csrc/core, csrc/os, csrc/emu, csrc/emu/ipc) and the cann provider
(csrc/cann: libascendcl.so opened with dlopen at run time, never linked) in,
with hidden visibility, next to its own sources (csrc/python); it does not
build or link libascendcl_emu.so and exports no acl* names, so it can sit
beside a real libascendcl in one process.

Build switches (environment variables):
  ASCEND_IPC_SANITIZE=1   build extension and C core with -fsanitize=address,undefined
                          (load with LD_PRELOAD=$(cc -print-file-name=libasan.so))
  ASCEND_IPC_NO_WERROR=1  do not turn warnings into errors (e.g. new compiler or numpy headers)
  ASCEND_IPC_DEBUG=1      -O0 -g3
"""

import glob
import os

import numpy
from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _env_on(name):
    return os.environ.get(name, "").strip().lower() not in ("", "0", "no", "false", "off")


def _sources():
    os.chdir(HERE)  # setuptools wants paths relative to setup.py
    srcs = []
    for pattern in ("csrc/python/*.c", "csrc/core/*.c", "csrc/os/*.c", "csrc/emu/*.c", "csrc/emu/ipc/*.c", "csrc/cann/*.c"):
        srcs.extend(sorted(glob.glob(pattern)))
    return srcs


def _headers():
    return sorted(glob.glob("csrc/**/*.h", recursive=True))


def _flags():
    compile_args = [
        "-std=gnu11",
        "-pthread",
        "-fvisibility=hidden",
        "-Wall",
        "-Wextra",
        "-Wno-unused-parameter",
        "-Wshadow",
        "-Wstrict-prototypes",
    ]
    link_args = ["-pthread"]
    if not _env_on("ASCEND_IPC_NO_WERROR"):
        compile_args.append("-Werror")
    if _env_on("ASCEND_IPC_DEBUG"):
        compile_args += ["-O0", "-g3"]
    if _env_on("ASCEND_IPC_SANITIZE"):
        san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
        compile_args += san + ["-O1", "-g"]
        link_args += san
    return compile_args, link_args


_compile_args, _link_args = _flags()

extension = Extension(
    "ascend_ipc._C",
    sources=_sources(),
    depends=_headers(),
    include_dirs=["csrc/include", "csrc", "csrc/python", numpy.get_include()],
    extra_compile_args=_compile_args,
    extra_link_args=_link_args,
    libraries=["dl", "m"],  # dlopen of libascendcl.so (part of libc from glibc 2.34 on); libm for random numbers
    language="c",
)

# Each flavour builds in a folder of its own, so a sanitizer build never reuses
# objects (or an up-to-date extension) of a plain one, nor the other way round.
_flavour = "python" + ("-asan" if _env_on("ASCEND_IPC_SANITIZE") else "") + ("-debug" if _env_on("ASCEND_IPC_DEBUG") else "")

setup(
    ext_modules=[extension],
    options={"build": {"build_base": os.path.join("build", _flavour)}},
)
