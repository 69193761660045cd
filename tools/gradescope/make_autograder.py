#!/usr/bin/env python3
"""Packs the Gradescope autograder zip for one lab.

    python3 tools/gradescope/make_autograder.py 00 -o autograder-lab00.zip \
        [--hidden-tests /path/outside/the/repo/lab00-hidden] [--cmake-arg=-DSCALELAB_CUDA=OFF] [--sanitize]

The zip holds the committed files of this checkout (git ls-files) with setup.sh and
run_autograder at its top (Gradescope's layout: the zip is unpacked into /autograder/source),
a gradescope.conf naming the lab, the cmake arguments and the grader's arguments (--sanitize:
every submission graded under AddressSanitizer and UBSan), and the hidden tests, if any, under
hidden-tests/. Standard library only.
"""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import labgen  # noqa: E402


def tracked_files(root: Path) -> list[str]:
    """The committed files when root is the top of a git checkout, else every file but build output."""
    try:
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True,
                             check=True, text=True).stdout.strip()
        if Path(top).resolve() == root.resolve():
            out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True).stdout
            return sorted(f for f in out.decode().split("\0") if f)
    except (OSError, subprocess.CalledProcessError):
        pass
    skip = {".git", "build", "out", "__pycache__"}
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and not skip.intersection(p.relative_to(root).parts))


def add_file(zf: zipfile.ZipFile, path: Path, arcname: str) -> None:
    info = zipfile.ZipInfo.from_file(path, arcname)
    info.compress_type = zipfile.ZIP_DEFLATED
    executable = path.stat().st_mode & 0o111
    info.external_attr = ((0o755 if executable else 0o644) | 0o100000) << 16
    with path.open("rb") as f:
        zf.writestr(info, f.read())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("lab", help="lab number, e.g. 00")
    p.add_argument("-o", "--output", type=Path, help="the zip to write (default: autograder-labNN.zip)")
    p.add_argument("--hidden-tests", type=Path, help="a directory of hidden tests (CMakeLists.txt + *.json)")
    p.add_argument("--cmake-arg", action="append", default=[], help="passed to the grader's cmake configure")
    p.add_argument("--sanitize", action="store_true",
                   help="grade every submission under AddressSanitizer and UBSan (tools/grade.py --sanitize): a write "
                        "past an array fails its test even when the numbers are right; time limits x2")
    args = p.parse_args(argv)
    lab = args.lab.zfill(2)
    if lab not in labgen.LAB_DIRS:
        print(f"make_autograder: unknown lab {args.lab}; labs are {', '.join(labgen.LAB_DIRS)}", file=sys.stderr)
        return 2
    problems = labgen.check(ROOT)
    if problems:
        print("make_autograder: labs/ is out of date with reference/ (run python3 tools/labgen.py):\n  "
              + "\n  ".join(problems), file=sys.stderr)
        return 1
    if args.hidden_tests and not (args.hidden_tests / "CMakeLists.txt").is_file():
        print(f"make_autograder: {args.hidden_tests} has no CMakeLists.txt (see docs/instructors.md)", file=sys.stderr)
        return 2
    out = args.output or Path(f"autograder-lab{lab}.zip")
    cmake_args = " ".join(shlex.quote("--cmake-arg=" + a) for a in args.cmake_arg)
    grade_args = "--sanitize" if args.sanitize else ""
    conf = (f"# written by tools/gradescope/make_autograder.py\nLAB={lab}\nCMAKE_ARGS={shlex.quote(cmake_args)}\n"
            f"GRADE_ARGS={shlex.quote(grade_args)}\n")
    files = tracked_files(ROOT)
    with zipfile.ZipFile(out, "w") as zf:
        for rel in files:
            path = ROOT / rel
            if path.is_file():
                add_file(zf, path, rel)
        add_file(zf, HERE / "setup.sh", "setup.sh")
        add_file(zf, HERE / "run_autograder", "run_autograder")
        info = zipfile.ZipInfo("gradescope.conf")
        info.external_attr = 0o100644 << 16
        zf.writestr(info, conf)
        hidden = 0
        if args.hidden_tests:
            base = args.hidden_tests.resolve()
            for path in sorted(base.rglob("*")):
                if path.is_file():
                    add_file(zf, path, "hidden-tests/" + path.relative_to(base).as_posix())
                    hidden += 1
    print(f"wrote {out}: lab {lab}, {len(files)} repository files, {hidden} hidden-test files"
          + (", graded under the sanitizers" if args.sanitize else ""))
    print("Upload it in Gradescope (Configure Autograder > Zip file upload); students submit their "
          f"labs/{labgen.LAB_DIRS[lab]}/ files (by path or by file name).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
