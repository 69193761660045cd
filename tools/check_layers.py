#!/usr/bin/env python3
"""The folders of reference/ form layers: a folder may include another only from below it, so
there is no cycle (a reader can learn them bottom up, and a stage's folder never reaches back into
the trainer). This script reads every #include "folder/..." in reference/, prints the folder graph,
and fails with the cycle when there is one.

  python3 tools/check_layers.py            # check reference/ (CI runs this)
  python3 tools/check_layers.py --graph    # also print each folder's dependencies
"""
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/', re.M)


def folder_graph(root):
    """{folder: {folders it includes}} for the top-level folders under root."""
    graph = {}
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".cpp", ".hpp", ".h", ".cu", ".cuh") or not path.is_file():
            continue
        folder = path.relative_to(root).parts[0]
        deps = graph.setdefault(folder, set())
        for dep in INCLUDE.findall(path.read_text(errors="replace")):
            if dep != folder and (root / dep).is_dir():
                deps.add(dep)
    return graph


def find_cycle(graph):
    """A list of folders forming a cycle (first == last), or None."""
    state = {}  # 1: on the current path, 2: done
    path = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def main(argv):
    root = pathlib.Path(__file__).resolve().parent.parent / "reference"
    if len(argv) > 1 and argv[1] not in ("--graph",):
        root = pathlib.Path(argv[1])
    graph = folder_graph(root)
    if "--graph" in argv:
        for folder in sorted(graph):
            print(f"{folder:10} -> {' '.join(sorted(graph[folder])) or '(nothing)'}")
    cycle = find_cycle(graph)
    if cycle:
        print("check_layers: the folders of reference/ include each other in a cycle: " + " -> ".join(cycle), file=sys.stderr)
        print("check_layers: move the shared declaration to the lower folder (see docs/architecture.md, "
              "'Layers of the code')", file=sys.stderr)
        return 1
    print(f"check_layers: {len(graph)} folders under reference/, no include cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
