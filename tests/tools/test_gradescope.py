#!/usr/bin/env python3
"""Tests of the Gradescope package (tools/gradescope/): make_autograder.py writes the zip
Gradescope unpacks into /autograder/source, and run_autograder hands its settings to the grader.
run_autograder runs here against a fake tools/grade.py that records its arguments, in a folder
laid out as Gradescope's (AUTOGRADER_ROOT), with the gradescope.conf the zip holds. Standard
library only."""
import json
import os
import shlex
import stat
import subprocess
import sys
import tempfile
import textwrap
import unittest
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAKE = ROOT / "tools" / "gradescope" / "make_autograder.py"
RUN = ROOT / "tools" / "gradescope" / "run_autograder"
HIDDEN = ROOT / "tests" / "tools" / "hidden-example"

# Stands in for tools/grade.py: writes its arguments next to itself, then the results file (or
# exits with FAKE_STATUS without one, as a grader that fails before grading does).
FAKE_GRADER = textwrap.dedent("""\
    import json, os, sys
    from pathlib import Path
    args = sys.argv[1:]
    (Path(__file__).parent / "args.json").write_text(json.dumps(args))
    status = int(os.environ.get("FAKE_STATUS", "0"))
    if status == 0:
        results = Path(args[args.index("--results") + 1])
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text(json.dumps({"score": 5, "tests": []}))
    sys.exit(status)
    """)


def make_zip(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(MAKE), "01", "-o", str(out), *extra], capture_output=True, text=True,
                          timeout=120)


class MakeAutograder(unittest.TestCase):
    def test_the_zip_holds_the_scripts_the_sources_the_settings_and_the_hidden_tests(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "ag.zip"
            p = make_zip(out, "--hidden-tests", str(HIDDEN), "--cmake-arg=-DSCALELAB_CUDA=OFF", "--sanitize")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("graded under the sanitizers", p.stdout)
            with zipfile.ZipFile(out) as zf:
                names = set(zf.namelist())
                for name in ("setup.sh", "run_autograder", "tools/grade.py", "labs/01-accumulation/README.md",
                             "hidden-tests/CMakeLists.txt", "hidden-tests/lab00-hidden.json"):
                    self.assertIn(name, names)
                for script in ("setup.sh", "run_autograder"):
                    self.assertTrue((zf.getinfo(script).external_attr >> 16) & stat.S_IXUSR, script)
                conf = zf.read("gradescope.conf").decode()
            settings = dict(line.split("=", 1) for line in conf.splitlines() if "=" in line)
            self.assertEqual(settings["LAB"], "01")
            self.assertEqual(shlex.split(settings["CMAKE_ARGS"]), ["--cmake-arg=-DSCALELAB_CUDA=OFF"])
            self.assertEqual(shlex.split(settings["GRADE_ARGS"]), ["--sanitize"])

            p = make_zip(out)
            self.assertEqual(p.returncode, 0, p.stderr)
            with zipfile.ZipFile(out) as zf:
                conf = zf.read("gradescope.conf").decode()
                self.assertFalse(any(n.startswith("hidden-tests/") for n in zf.namelist()))
            self.assertIn("GRADE_ARGS=''", conf)

    def test_bad_arguments(self):
        with tempfile.TemporaryDirectory() as tmp:
            p = subprocess.run([sys.executable, str(MAKE), "42", "-o", str(Path(tmp) / "x.zip")], capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(p.returncode, 2)
            self.assertIn("unknown lab 42", p.stderr)
            p = make_zip(Path(tmp) / "x.zip", "--hidden-tests", tmp)
            self.assertEqual(p.returncode, 2)
            self.assertIn("has no CMakeLists.txt", p.stderr)


class RunAutograder(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.ag = Path(self.tmp.name) / "autograder"
        src = self.ag / "source"
        (src / "tools").mkdir(parents=True)
        (src / "tools" / "grade.py").write_text(FAKE_GRADER)
        (self.ag / "submission").mkdir()
        zipped = Path(self.tmp.name) / "ag.zip"
        p = make_zip(zipped, "--cmake-arg=-DSCALELAB_CUDA=OFF", "--sanitize")
        self.assertEqual(p.returncode, 0, p.stderr)
        with zipfile.ZipFile(zipped) as zf:
            (src / "gradescope.conf").write_bytes(zf.read("gradescope.conf"))

    def tearDown(self):
        self.tmp.cleanup()

    def run_autograder(self, status=0):
        env = dict(os.environ, AUTOGRADER_ROOT=str(self.ag), FAKE_STATUS=str(status))
        return subprocess.run(["bash", str(RUN)], capture_output=True, text=True, env=env, timeout=60)

    def test_the_settings_reach_the_grader(self):
        (self.ag / "source" / "hidden-tests").mkdir()
        p = self.run_autograder()
        self.assertEqual(p.returncode, 0, p.stderr)
        args = json.loads((self.ag / "source" / "tools" / "args.json").read_text())
        self.assertEqual(args, ["01", "--student-dir", f"{self.ag}/submission", "--build-dir", f"{self.ag}/build",
                                "--results", f"{self.ag}/results/results.json", "--hidden-tests",
                                f"{self.ag}/source/hidden-tests", "--cmake-arg=-DSCALELAB_CUDA=OFF", "--sanitize"])
        self.assertEqual(json.loads((self.ag / "results" / "results.json").read_text())["score"], 5)

    def test_a_grader_that_fails_leaves_a_results_file_that_says_so(self):
        (self.ag / "results").mkdir()
        (self.ag / "results" / "results.json").write_text('{"score": 100}')  # not this run's
        p = self.run_autograder(status=3)
        self.assertEqual(p.returncode, 0, p.stderr)
        data = json.loads((self.ag / "results" / "results.json").read_text())
        self.assertEqual(data["score"], 0)
        self.assertIn("exit status 3", data["output"])
        self.assertIn("tell the course staff", data["output"])

    def test_a_conf_without_grade_args_still_runs(self):
        conf = self.ag / "source" / "gradescope.conf"
        conf.write_text("".join(line + "\n" for line in conf.read_text().splitlines()
                                if not line.startswith("GRADE_ARGS")))
        p = self.run_autograder()
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("--sanitize", json.loads((self.ag / "source" / "tools" / "args.json").read_text()))


if __name__ == "__main__":
    unittest.main(verbosity=2)
