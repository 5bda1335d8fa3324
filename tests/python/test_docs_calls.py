"""The documentation of the CANN calls agrees with csrc/core/calls.h, the one list of them.

docs/c-api.md: every call of calls.h has exactly one row (a row names its calls in its first
cell), and a row names only calls of calls.h or the pure functions csrc/api defines itself.
docs/hardware.md: its "documented from" table lists every call whose `since` is set, under that
version, and nothing else.
"""

import collections
import pathlib
import re

import pytest

pytestmark = [pytest.mark.timeout(30), pytest.mark.python_only]

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENTRY = re.compile(r"\bX\(\s*\w+\s*,\s*(acl\w+)\s*,")
# The since token, then the need; a line break (with the macro's backslash) may sit between.
SINCE = re.compile(r'(NULL|"[^"]*")\s*,(?:\s|\\)*(?:REQUIRED|OPTIONAL)\s*\)')


def _calls() -> dict:
    """calls.h's calls in order, each with its since (None for NULL)."""
    text = (ROOT / "csrc" / "core" / "calls.h").read_text()
    entries = list(ENTRY.finditer(text))
    out = {}
    for i, m in enumerate(entries):
        end = entries[i + 1].start() if i + 1 < len(entries) else len(text)
        s = SINCE.search(text, m.end(), end)
        assert s, f"no since for {m.group(1)}"
        assert m.group(1) not in out, f"{m.group(1)} twice in calls.h"
        out[m.group(1)] = None if s.group(1) == "NULL" else s.group(1).strip('"')
    return out


def _pure_functions() -> set:
    """The acl* functions csrc/api defines by name (not the generated forwarders)."""
    names = set()
    for path in (ROOT / "csrc" / "api").glob("*.c"):
        names |= set(re.findall(r"^ACL_FUNC_VISIBILITY\s+[\w\s\*]+?\b(acl\w+)\s*\(", path.read_text(), re.M))
    return names


def test_calls_h_parses():
    calls = _calls()
    assert len(calls) > 150 and "aclrtMalloc" in calls and calls["aclrtIpcMemGetExportKey"] == "CANN 8.2.RC1"
    assert all(v is None or re.fullmatch(r"CANN \d+\.\d+\.(RC\d+|\d+)", v) for v in calls.values()), calls


def test_c_api_has_one_row_per_call():
    calls = _calls()
    rows = collections.defaultdict(list)
    for number, line in enumerate((ROOT / "docs" / "c-api.md").read_text().splitlines(), 1):
        if line.startswith("| `acl"):
            for name in set(re.findall(r"`(acl\w+)", line.split("|")[1])):
                rows[name].append(number)
    missing = [c for c in calls if c not in rows]
    twice = {c: rows[c] for c in calls if len(rows.get(c, ())) > 1}
    pure = _pure_functions()
    assert pure, "csrc/api defines no pure function: the pattern is stale"
    strangers = sorted(n for n in rows if n not in calls and n not in pure)
    assert not missing, f"calls of calls.h without a row in docs/c-api.md: {missing}"
    assert not twice, f"calls with more than one row in docs/c-api.md (line numbers): {twice}"
    assert not strangers, f"docs/c-api.md rows naming what calls.h does not list: {strangers}"


def test_hardware_since_table_matches_calls_h():
    calls = _calls()
    doc = (ROOT / "docs" / "hardware.md").read_text()
    table = doc[doc.index("| calls | documented from |"):]
    table = table[:table.index("\n\n")]
    listed = {}
    for line in table.splitlines()[2:]:
        names_cell, version_cell = line.split("|")[1:3]
        version = re.match(r"\s*(CANN \d+\.\d+\.(?:RC\d+|\d+))", version_cell)
        assert version, line
        for name in re.findall(r"`(acl\w+)`", names_cell):
            assert name not in listed, f"{name} twice in the table"
            listed[name] = version.group(1)
    expected = {c: v for c, v in calls.items() if v is not None}
    assert listed == expected, {c: (listed.get(c), expected.get(c)) for c in set(listed) | set(expected)
                                if listed.get(c) != expected.get(c)}
