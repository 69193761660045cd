#!/usr/bin/env python3
"""tools/check_layers.py: finds a folder cycle in a synthetic tree, and none in reference/."""
import pathlib
import subprocess
import sys
import tempfile

TOOL = pathlib.Path(__file__).resolve().parents[2] / "tools" / "check_layers.py"


def run(*args):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True)


def main():
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for folder, text in {"core": "", "model": '#include "core/a.hpp"\n#include "train/t.hpp"\n',
                             "train": '#include "model/m.hpp"\n'}.items():
            (root / folder).mkdir()
            (root / folder / "x.hpp").write_text(text)
        r = run(str(root))
        if r.returncode != 1 or "model -> train -> model" not in r.stderr:
            failures.append(f"a cycle model <-> train was not reported: rc {r.returncode}, {r.stderr!r}")
        (root / "model" / "x.hpp").write_text('#include "core/a.hpp"\n')
        r = run(str(root))
        if r.returncode != 0:
            failures.append(f"a tree without a cycle was refused: rc {r.returncode}, {r.stderr!r}")
    r = run()
    if r.returncode != 0:
        failures.append(f"reference/ has a folder cycle: {r.stderr.strip()}")
    for f in failures:
        print("FAIL:", f)
    print("test_check_layers:", "failed" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
