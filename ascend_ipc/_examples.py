"""Small worker functions for examples and notebooks.

With the ``spawn`` (and ``forkserver``) start method a child process finds its target function
by importing it, so the function must live in an importable module; functions defined in a
notebook or an interactive session live in ``__main__`` and cannot be found. These helpers are
shipped in the package for that reason.
"""

from __future__ import annotations

from typing import Any


def add_one(handle: Any, amount: float = 1) -> None:
    """Open ``handle`` in this process, add ``amount`` to every element in place, close.

    The exporter sees the change in its own array: nothing is copied back.
    """
    import numpy as np

    with handle.open() as imported:
        view = np.from_dlpack(imported)
        view += amount
        del view

