#!/usr/bin/env python3
"""The library's files call each other one way: no loop among them.

Reads the symbols each object of the built library defines and uses (nm),
makes the graph "file A calls a function or uses a variable of file B", and
fails, naming the files, if any files form a loop. Prints the layers found
(each file above everything it calls) so a reader can compare them with the
drawing in docs/design.md.

    tests/layers/check_layers.py BUILD_DIR [--graph]
"""
import os
import subprocess
import sys


def read_objects(obj_root):
    objs = []
    for d, _, files in os.walk(obj_root):
        objs += [os.path.join(d, f) for f in files if f.endswith(".o")]
    if not objs:
        sys.exit(f"check_layers: no objects under {obj_root} (build the library first)")
    defined, used = {}, {}
    for o in sorted(objs):
        name = os.path.relpath(o, obj_root)[: -len(".o")]
        out = subprocess.run(["nm", o], check=True, capture_output=True, text=True).stdout
        uses = set()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBR":  # global text, data, bss, read-only
                defined[parts[2]] = name
            elif len(parts) == 2 and parts[0] == "U":
                uses.add(parts[1])
        used[name] = uses
    graph = {f: sorted({defined[s] for s in u if s in defined and defined[s] != f}) for f, u in used.items()}
    return graph


def loops(graph):
    """Strongly connected components of more than one file (Tarjan, iterative)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack.add(v)
            succ = graph[v]
            if i < len(succ):
                work.append((v, i + 1))
                w = succ[i]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            for w in succ:
                if w in on_stack:
                    low[v] = min(low[v], low[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def layers(graph):
    """Each file's height: 0 when it calls no other file, else 1 + the highest it calls."""
    height = {}

    def h(f):
        if f not in height:
            height[f] = 1 + max((h(g) for g in graph[f]), default=-1)
        return height[f]

    for f in graph:
        h(f)
    return height


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    graph = read_objects(os.path.join(argv[1], "obj"))
    found = loops(graph)
    if "--graph" in argv or found:
        for f in sorted(graph):
            print(f"  {f} -> {' '.join(graph[f]) or '(nothing)'}")
    if found:
        for comp in found:
            print("check_layers: these files call each other in a loop: " + ", ".join(comp), file=sys.stderr)
        return 1
    height = layers(graph)
    by = {}
    for f, n in height.items():
        by.setdefault(n, []).append(f)
    print(f"check_layers: {len(graph)} files, no loop; layers, top first:")
    for n in sorted(by, reverse=True):
        print(f"  {n:2d}  {' '.join(sorted(by[n]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
