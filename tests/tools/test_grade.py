#!/usr/bin/env python3
"""Tests of tools/grade.py: the grader runs fake test binaries (shell scripts that pass, fail, crash,
hang or flood) from a synthetic grading directory, and must survive all of them and write a valid
Gradescope results.json. A tiny CMake project checks the build path (standard library only)."""
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GRADE = ROOT / "tools" / "grade.py"

FAILURE_TEMPLATE = """
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
test_layers is a Catch v2.13.10 host application.
Run with -? for options

-------------------------------------------------------------------------------
layernorm_backward matches finite differences
-------------------------------------------------------------------------------
{root}/tests/model/test_layers.cpp:40
...............................................................................

{body}
===============================================================================
test cases: 1 | 1 failed
assertions: 3 | 2 passed | 1 failed
"""

STUB_BODY = """{root}/tests/model/test_layers.cpp:40: FAILED:
  {{Unknown expression after the reported line}}
due to unexpected exception with message:
  Lab 00: implement layernorm_backward (see labs/00-naive/README.md, section
  3.2)
"""

MISMATCH_BODY = """{root}/tests/model/test_layers.cpp:57: FAILED:
  CHECK( _c.ok )
with expansion:
  false
with message:
  dinp: MISMATCH over 96 elements; max abs err 0.5, max rel err 1; 96 outside
  tolerance, first at index 0: got 0.25, expected 0.75
"""

# What a real test main does after Catch2's session returns (tests/support/graded_results.cpp):
# sign "case ..." lines with the run's secret. Fakes call it as `verdict CASE...` with CASE =
# status:passed:failed:name; "badtoken" signs with a guessed secret.
VERDICT_PY = """
import hashlib, hmac, os, sys
nonce, path = os.environ.get("SCALELAB_GRADE_NONCE", ""), os.environ.get("SCALELAB_GRADE_RESULTS", "")
rank = int(os.environ.get("FAKE_RANK", "0"))
body = f"scalelab-graded-results 1\\nrank {rank}\\nsession 0\\n"
for case in sys.argv[1:]:
    if case == "badtoken":
        nonce = "0" * 64
        continue
    status, passed, failed, name = case.split(":", 3)
    body += f"case {status} {passed} {failed} {name}\\n"
token = hmac.new(nonce.encode(), body.encode(), hashlib.sha256).hexdigest()
open(f"{path}.{rank}", "w").write(body + f"token {token}\\n")
"""
VERDICT = f'{sys.executable} "$(dirname "$0")/verdict.py"'

FAKES = {
    "passes": 'case "$5" in "[graded][a]") ;; *) echo "wrong spec: $*"; exit 3;; esac\n'
              '[ "$2" = NoTests ] || exit 3\n'
              f'{VERDICT} "passed:7:0:first case" "passed:5:0:second case"; echo "All tests passed"; exit 0',
    "stub": "cat <<'EOF'\n" + FAILURE_TEMPLATE.format(root=ROOT, body=STUB_BODY.format(root=ROOT)) + "EOF\nexit 1",
    "mismatch": "cat <<'EOF'\n" + FAILURE_TEMPLATE.format(root=ROOT, body=MISMATCH_BODY.format(root=ROOT))
                + "EOF\nexit 1",
    "segv": 'echo "starting"; kill -SEGV $$',
    "asan": "cat <<'EOF'\n==4242==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x6020 at pc 0x55d0\n"
            "WRITE of size 4 at 0x6020 thread T0\n"
            "    #0 0x55d0c0 in scalelab::add_into(float*, float const*, unsigned long) /src/reference/core/simd.cpp:12:7\n"
            f"    #1 0x55d0c1 in scalelab::layernorm_backward(float*) {ROOT}/labs/00-naive/model/layers/layernorm.cpp:61:14\n"
            "    #2 0x55d0c2 in main /src/tests/main.cpp:3:1\nEOF\nexit 1",
    "exit1": 'for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14; do echo "line $i"; done; exit 1',
    "abort": 'echo "terminate called after throwing an instance of std::logic_error"; kill -ABRT $$',
    "hang": 'sleep 1000 &\necho $! > "$HANG_PID_FILE"\nwait',
    "flood": 'yes "flooding the output with the same line again and again"',
    "gpu": 'echo "no CUDA device: skipping"; exit 77',
    "silent": "exit 0",
    "nomatch": 'echo "No test cases matched \'$5\'"; exit 2',
    "fakepass": 'echo "All tests passed (1 assertion in 1 test case)"; exit 1',
    "rankcount": f'echo "rank $FAKE_RANK"; {VERDICT} "passed:2:0:ring"',
    # Forgeries: each must score 0.
    "printsummary": 'echo "All tests passed (12 assertions in 2 test cases)"; exit 0',
    "forgedtoken": f'{VERDICT} badtoken "passed:3:0:forged"; exit 0',
    "noassert": f'{VERDICT} "passed:0:0:returns before its first assertion"; exit 0',
    "somefailed": f'{VERDICT} "passed:3:0:fine" "failed:2:1:broken"; exit 0',
    "latechild": f'(sleep 1; {VERDICT} "passed:3:0:late") &\nexit 0',
    # Passes only in a working folder of its own, whose one entry is its own results folder: a
    # forger that writes into every results folder it finds there spoils no other run.
    "ownfolder": 'own=$(cd "$(dirname "$SCALELAB_GRADE_RESULTS")/.." && pwd -P)\n'
                 '[ "$own" = "$(pwd -P)" ] && [ "$(ls -A | wc -l)" = 1 ] || { echo "shared folder: $(ls -A)"; exit 3; }\n'
                 f'{VERDICT} "passed:1:0:own folder"',
    "onerank": f'[ "$FAKE_RANK" = 1 ] || {VERDICT} "passed:2:0:ring"',
    "watchdog": 'echo "scalelab: rank 1 (rank 1 of 2 in its communicator): recv from rank 0 did not complete '
                'within 20 s (comm timeout). A peer rank has probably died or hung; ending the job."\n'
                'echo "mpiexec noticed that process rank 0 with PID 99 on node x exited on signal 15 (Terminated)."\n'
                'exit 3',
}

FAKE_MPIEXEC = """#!/bin/sh
# fake mpiexec: -n N --oversubscribe cmd...  runs cmd N times with FAKE_RANK set
[ "$1" = -n ] || exit 9
n=$2; shift 3
[ "$OMPI_ALLOW_RUN_AS_ROOT" = 1 ] || { echo "no OMPI_ALLOW_RUN_AS_ROOT"; exit 9; }
i=0
while [ $i -lt $n ]; do FAKE_RANK=$i "$@" || exit $?; i=$((i+1)); done
"""


def entry(name, binary, points=2, timeout=10, **extra):
    return dict({"name": name, "lab": "00", "points": points, "timeout": timeout, "binary": binary,
                 "spec": "[graded][a]", "functions": ["layernorm_backward"], "hint": f"hint of {name}"}, **extra)


class GraderOnFakeBinaries(unittest.TestCase):
    extra_args: list[str] = []  # the side-by-side subclass below grades the same fakes with --test-jobs

    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="grade-test-"))
        cls.bin = cls.tmp / "bin"
        cls.bin.mkdir()
        (cls.bin / "verdict.py").write_text(VERDICT_PY)
        for name, body in FAKES.items():
            p = cls.bin / name
            p.write_text("#!/bin/sh\n" + body + "\n")
            p.chmod(p.stat().st_mode | stat.S_IXUSR)
        mpi = cls.tmp / "fake-mpiexec"
        mpi.write_text(FAKE_MPIEXEC)
        mpi.chmod(mpi.stat().st_mode | stat.S_IXUSR)
        cls.grading = cls.tmp / "grading"
        cls.grading.mkdir()
        tests = [entry("t.passes", "passes", points=3), entry("t.stub", "stub"), entry("t.mismatch", "mismatch"),
                 entry("t.segv", "segv"), entry("t.asan", "asan"), entry("t.exit1", "exit1"), entry("t.abort", "abort"), entry("t.hang", "hang", timeout=1.5),
                 entry("t.flood", "flood", timeout=60), entry("t.gpu", "gpu", labels=["gpu"]),
                 entry("t.silent", "silent"), entry("t.nomatch", "nomatch"), entry("t.fakepass", "fakepass"),
                 entry("t.mpi", "rankcount", ranks=2), entry("t.missing", "does_not_exist")]
        tests += [entry(f"t.forged.{name}", name) for name in ("printsummary", "forgedtoken", "noassert",
                                                                 "somefailed", "latechild")]
        tests += [entry("t.mpi_onerank", "onerank", ranks=2), entry("t.watchdog", "watchdog", ranks=2),
                  entry("t.ownfolder", "ownfolder")]
        cls.names = [t["name"] for t in tests]
        (cls.grading / "lab00-fake.json").write_text(json.dumps({"tests": tests}))
        (cls.grading / "lab01-other.json").write_text(json.dumps({"tests": [dict(entry("t.lab01", "passes"),
                                                                                 lab="01")]}))
        cls.results = cls.tmp / "out" / "results.json"
        cls.pid_file = cls.tmp / "hang.pid"
        env = dict(os.environ, HANG_PID_FILE=str(cls.pid_file))
        start = time.monotonic()
        cls.proc = subprocess.run(
            [sys.executable, str(GRADE), "00", "--no-build", "--bin-dir", str(cls.bin), "--grading-dir",
             str(cls.grading), "--results", str(cls.results), "--build-dir", str(cls.tmp / "build"),
             "--mpiexec", str(mpi), *cls.extra_args], capture_output=True, text=True, env=env, timeout=120)
        cls.seconds = time.monotonic() - start
        cls.data = json.loads(cls.results.read_text()) if cls.results.exists() else None
        cls.by_name = {t["name"]: t for t in cls.data["tests"]} if cls.data else {}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def test_grader_finishes_despite_crashes_hangs_and_floods(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        self.assertLess(self.seconds, 60)
        self.assertIsNotNone(self.data)

    def test_results_json_has_gradescope_fields(self):
        d = self.data
        self.assertIsInstance(d["score"], (int, float))
        self.assertIsInstance(d["execution_time"], (int, float))
        self.assertEqual([t["name"] for t in d["tests"]], self.names, "only lab 00's tests, in the file's order")
        for i, t in enumerate(d["tests"], start=1):
            self.assertEqual(set(t), {"name", "number", "score", "max_score", "status", "output", "visibility"})
            self.assertEqual(t["number"], str(i))
            self.assertIn(t["status"], ("passed", "failed"))
            self.assertIn(t["visibility"], ("visible", "hidden", "after_due_date", "after_published"))
            self.assertIsInstance(t["output"], str)
            self.assertLessEqual(len(t["output"]), 20000)

    def test_only_a_real_pass_earns_points(self):
        self.assertEqual(self.by_name["t.passes"]["score"], 3)
        self.assertEqual(self.by_name["t.passes"]["status"], "passed")
        self.assertEqual(self.by_name["t.mpi"]["score"], 2)
        for name, t in self.by_name.items():
            if name not in ("t.passes", "t.mpi", "t.ownfolder"):
                self.assertEqual(t["score"], 0, name)
                self.assertEqual(t["status"], "failed", name)
        self.assertEqual(self.data["score"], 7)

    def test_stub_failure_names_the_lab_function_and_where_to_look(self):
        out = self.by_name["t.stub"]["output"]
        self.assertIn("Lab 00: implement layernorm_backward (see labs/00-naive/README.md, section 3.2)", out)
        self.assertIn("hint of t.stub", out)

    def test_mismatch_hint_shows_the_first_mismatch(self):
        out = self.by_name["t.mismatch"]["output"]
        self.assertIn("First failure: tests/model/test_layers.cpp:57", out)
        self.assertIn("layernorm_backward matches finite differences", out)
        self.assertIn("first at index 0: got 0.25, expected 0.75", out)
        # the table's one-line hint joins Catch2's 80-column wrapping again
        self.assertIn("96 outside tolerance, first at index 0", self.proc.stdout)
        self.assertIn("hint of t.mismatch", out)

    def test_crashes_are_reported_with_the_signal(self):
        self.assertIn("crashed (SIGSEGV)", self.by_name["t.segv"]["output"])
        self.assertIn("crashed (SIGABRT)", self.by_name["t.abort"]["output"])

    def test_a_sanitizer_report_names_its_kind_and_the_first_frame_in_labs(self):
        t = self.by_name["t.asan"]
        self.assertEqual(t["score"], 0)
        self.assertIn("crashed (sanitizer)", t["output"])
        self.assertIn("AddressSanitizer: heap-buffer-overflow, in scalelab::layernorm_backward "
                      "(labs/00-naive/model/layers/layernorm.cpp:61)", t["output"])
        self.assertRegex(self.proc.stdout, r"t\.asan +0/2 +crashed \(sanitizer\) +AddressSanitizer: heap-buffer-overflow in "
                                           r"scalelab::layernorm_backward")

    def test_a_failure_without_a_report_shows_the_last_lines_in_the_terminal(self):
        details = self.by_name["t.exit1"]["output"].split("--- test output ---")[0]
        self.assertIn("| line 14", details)
        self.assertIn("| line 3", details)
        self.assertNotIn("| line 2\n", details)

    def test_hang_is_killed_with_its_children(self):
        self.assertIn("hang", self.by_name["t.hang"]["output"])
        self.assertIn("No result within the time limit of 1.5 s", self.by_name["t.hang"]["output"])
        pid = int(self.pid_file.read_text())
        time.sleep(0.2)
        alive = True
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            alive = False
        if alive:  # a zombie waiting for its reaper counts as dead
            try:
                alive = "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
            except OSError:
                alive = False
        self.assertFalse(alive, "the hanging test's background child survived")

    def test_flood_is_cut_and_capped(self):
        t = self.by_name["t.flood"]
        self.assertIn("output flood", t["output"])
        self.assertIn("left out", t["output"])

    def test_gpu_skip_earns_nothing_and_says_why(self):
        self.assertIn("skipped (no GPU)", self.by_name["t.gpu"]["output"])

    def test_exit_zero_needs_the_signed_verdict_and_a_summary_needs_exit_zero(self):
        self.assertIn("wrote no verdict", self.by_name["t.silent"]["output"])
        self.assertEqual(self.by_name["t.fakepass"]["score"], 0)

    def test_forgeries_earn_nothing_and_say_why(self):
        why = {"printsummary": "wrote no verdict", "forgedtoken": "not signed by this run's test runner",
               "noassert": "ended without checking anything (no assertion)",
               "somefailed": 'test case "broken" failed', "latechild": "wrote no verdict"}
        for name, text in why.items():
            t = self.by_name[f"t.forged.{name}"]
            self.assertEqual((t["score"], t["status"]), (0, "failed"), name)
            self.assertIn(text, t["output"], name)

    def test_every_rank_must_sign(self):
        t = self.by_name["t.mpi_onerank"]
        self.assertEqual(t["score"], 0)
        self.assertIn("rank 1 wrote no verdict", t["output"])

    def test_watchdog_hang_names_the_rank_and_the_call(self):
        t = self.by_name["t.watchdog"]
        self.assertEqual(t["score"], 0)
        self.assertIn("hang", t["output"])
        self.assertNotIn("SIGTERM", t["output"].split("--- test output ---")[0])
        self.assertIn("[22/23] t.watchdog: hang: rank 1: recv from rank 0 did not complete within 20 s",
                      self.proc.stderr)
        self.assertRegex(self.proc.stdout, r"t\.watchdog +0/2 +hang +rank 1: recv from rank 0 did not complete")

    def test_spec_matching_nothing_is_a_setup_problem(self):
        self.assertIn("course staff", self.by_name["t.nomatch"]["output"])

    def test_missing_binary_is_not_built(self):
        self.assertIn("not built", self.by_name["t.missing"]["output"])

    def test_table_lists_every_test_with_points(self):
        out = self.proc.stdout
        for line in ["t.passes", "3/3", "0/2", "crashed (SIGSEGV)", "hang", "output flood", "total", "7/47"]:
            self.assertIn(line, out)
        self.assertIn("Lab 00: implement layernorm_backward (see labs/00-naive/README.md, section 3.2)", out)

    def test_expect_modes(self):
        base = [sys.executable, str(GRADE), "00", "--no-build", "--bin-dir", str(self.bin), "--grading-dir",
                str(self.grading), "--results", str(self.tmp / "r2.json"), "--build-dir", str(self.tmp / "build")]
        ok = subprocess.run(base + ["--only", "t.passes", "--expect", "full"], capture_output=True, text=True)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        zero = subprocess.run(base + ["--only", "t.stub", "--only", "t.gpu", "--expect", "zero"],
                              capture_output=True, text=True)
        self.assertEqual(zero.returncode, 0, zero.stderr)
        bad = subprocess.run(base + ["--only", "t.stub", "--only", "t.segv", "--only", "t.mismatch", "--expect",
                                     "zero"], capture_output=True, text=True)
        self.assertEqual(bad.returncode, 1)
        self.assertIn("t.segv crashed (SIGSEGV)", bad.stderr)
        self.assertIn("t.mismatch failed without naming the missing function", bad.stderr)
        notfull = subprocess.run(base + ["--only", "t.passes", "--only", "t.stub", "--expect", "full"],
                                 capture_output=True, text=True)
        self.assertEqual(notfull.returncode, 1)


class GraderOnFakeBinariesSideBySide(GraderOnFakeBinaries):
    """The same fakes graded four at a time: every outcome as when graded one at a time, in the
    same order (a hang, a flood and a forger's late child run beside the others)."""
    extra_args = ["--test-jobs", "4"]

    def test_no_test_jobs_is_an_error(self):
        p = subprocess.run([sys.executable, str(GRADE), "00", "--no-build", "--bin-dir", str(self.bin),
                            "--grading-dir", str(self.grading), "--build-dir", str(self.tmp / "build"),
                            "--test-jobs", "0"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("grade: --test-jobs 0: give the number of tests to run side by side, 1 or more", p.stderr)


class OnlyAndList(unittest.TestCase):
    """--only takes names or prefixes, and a name that matches nothing is an error that leaves the
    last results.json alone; --list prints the lab's tests without running them."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="grade-only-"))
        cls.grading = cls.tmp / "grading"
        cls.grading.mkdir()
        names = ["lab00.fd_a", "lab00.fd_b", "lab00.oracle"]
        (cls.grading / "lab00-x.json").write_text(json.dumps({"tests": [entry(n, "missing") for n in names]}))
        cls.results = cls.tmp / "results.json"

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def grade(self, *extra):
        return subprocess.run([sys.executable, str(GRADE), "00", "--no-build", "--bin-dir", str(self.tmp),
                               "--grading-dir", str(self.grading), "--results", str(self.results),
                               "--build-dir", str(self.tmp / "build"), *extra], capture_output=True, text=True,
                              timeout=60)

    def test_unknown_name_is_an_error_naming_the_tests(self):
        self.results.write_text("earlier results\n")
        p = self.grade("--only", "lab00.fd_a", "--only", "lab00.typo")
        self.assertEqual(p.returncode, 2)
        self.assertIn("lab00.typo", p.stderr)
        for name in ("lab00.fd_a", "lab00.fd_b", "lab00.oracle"):
            self.assertIn(name, p.stderr)
        self.assertEqual(self.results.read_text(), "earlier results\n")

    def test_prefix_selects_every_test_it_starts(self):
        p = self.grade("--only", "lab00.fd_")
        self.assertEqual(p.returncode, 0, p.stderr)
        names = [t["name"] for t in json.loads(self.results.read_text())["tests"]]
        self.assertEqual(names, ["lab00.fd_a", "lab00.fd_b"])

    def test_list(self):
        p = self.grade("--list")
        self.assertEqual(p.returncode, 0, p.stderr)
        for name in ("lab00.fd_a", "lab00.fd_b", "lab00.oracle", "3 tests, 6 points"):
            self.assertIn(name, p.stdout)
        self.assertNotIn("[1/3]", p.stderr)  # nothing ran

    def test_sanitize_multiplies_every_time_limit(self):
        sys.path.insert(0, str(ROOT / "tools"))
        import grade
        plain, sanitized = self.grade("--list"), self.grade("--list", "--sanitize")
        self.assertEqual(sanitized.returncode, 0, sanitized.stderr)
        self.assertIn("10 s", plain.stdout)  # entry()'s limit
        self.assertIn(f"{10 * grade.SANITIZE_TIME_SCALE} s", sanitized.stdout)
        self.assertNotIn(" 10 s", sanitized.stdout)


class GraderBuild(unittest.TestCase):
    """The build path on a tiny CMake project: a compile error gives one failed "build" entry.

    The tests share one project and its build folders (the plain build serves two of them), and
    Catch2's runner compiles once per build into a library both test programs link: the runner is
    most of the compile time."""

    @classmethod
    def setUpClass(cls):
        if not shutil.which("cmake"):
            raise unittest.SkipTest("no cmake")
        cls.tmp = Path(tempfile.mkdtemp(prefix="grade-build-"))
        src = cls.tmp / "src"
        (src / "grading").mkdir(parents=True)
        (src / "CMakeLists.txt").write_text(textwrap.dedent("""\
            cmake_minimum_required(VERSION 3.16)
            project(fake CXX)
            set(CMAKE_CXX_STANDARD 20)
            option(BROKEN "" OFF)
            if(BROKEN)
              add_executable(fake_test broken.cpp)
            else()
              find_package(Catch2 REQUIRED)
              if(SANITIZE)
                add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer)
                add_link_options(-fsanitize=address,undefined)
              endif()
              add_library(runner STATIC runner.cpp)
              target_include_directories(runner PRIVATE SUPPORT)
              target_link_libraries(runner PUBLIC Catch2::Catch2)
              add_executable(fake_test ok.cpp)
              add_executable(memory_test memory.cpp)
              foreach(t fake_test memory_test)
                target_link_libraries(${t} PRIVATE runner)
              endforeach()
            endif()
            """).replace("SUPPORT", str(ROOT / "tests" / "support")))
        # A real Catch2 runner with the real verdict writer: its HMAC must be what grade.py expects,
        # and a test case without an assertion must not pass.
        (src / "runner.cpp").write_text(textwrap.dedent("""\
            #define CATCH_CONFIG_RUNNER
            #include <catch2/catch.hpp>
            #include "graded_results.hpp"
            int main(int argc, char** argv) { return scalelab_test::run_catch_session(argc, argv); }
            """))
        (src / "ok.cpp").write_text(textwrap.dedent("""\
            #include <catch2/catch.hpp>
            TEST_CASE("adds", "[graded][a]") { CHECK(1 + 1 == 2); }
            TEST_CASE("checks nothing", "[graded][empty]") {}
            """))
        (src / "broken.cpp").write_text("int main() { return undeclared_name_in_student_code; }\n")
        # --sanitize: the debug-asan preset's cache variables turn the sanitizers on. One test case
        # writes one float past a vector (right numbers, and silent without the sanitizer: the
        # write lands in the allocation's padding), one leaks.
        (src / "CMakePresets.json").write_text(json.dumps({"version": 6, "configurePresets": [
            {"name": "debug-asan", "cacheVariables": {"SANITIZE": "ON", "CMAKE_BUILD_TYPE": "Debug"}}]}))
        (src / "memory.cpp").write_text(textwrap.dedent("""\
            #include <catch2/catch.hpp>
            #include <vector>
            volatile int n = 4;
            int* volatile leaked = nullptr;
            TEST_CASE("one past", "[graded][oob]") {
              std::vector<float> v(4, 1.0f);
              float* p = v.data();
              for (int i = 0; i <= n; ++i) p[i] = 2.0f;  // one too far
              CHECK(v[3] == 2.0f);
            }
            TEST_CASE("leaks", "[graded][leak]") {
              leaked = new int[4]{7};
              CHECK(leaked[0] == 7);
              leaked = nullptr;
            }
            """))
        (src / "grading-memory").mkdir()
        (src / "grading-memory" / "lab00-m.json").write_text(json.dumps({"tests": [
            entry("m.oob", "memory_test", spec="[graded][oob]"), entry("m.leak", "memory_test", spec="[graded][leak]")]}))
        (src / "grading" / "lab00-x.json").write_text(json.dumps({"tests": [
            entry("x.one", "fake_test", points=4), entry("x.two", "fake_test", points=6),
            entry("x.empty", "fake_test", points=5, spec="[graded][empty]")]}))
        cls.src = src

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def grade(self, *extra, grading="grading", build="build"):
        results = self.tmp / f"results-{self._testMethodName}-{build}.json"
        p = subprocess.run([sys.executable, str(GRADE), "00", "--source-dir", str(self.src), "--build-dir",
                            str(self.tmp / build), "--grading-dir", str(self.src / grading), "--results",
                            str(results), "--jobs", "2", *extra], capture_output=True, text=True, timeout=300)
        return p, json.loads(results.read_text())

    def test_sanitize_fails_what_only_the_sanitizers_see(self):
        plain, data = self.grade(grading="grading-memory")
        self.assertEqual(plain.returncode, 0, plain.stderr)
        self.assertEqual(data["score"], 4, plain.stdout)  # the right numbers: full marks without --sanitize
        p, data = self.grade("--sanitize", grading="grading-memory", build="build-sanitize")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("-DSANITIZE=ON", p.stderr)  # the preset's cache variables reached the configure
        self.assertIn("under AddressSanitizer and UBSan", p.stdout)
        self.assertEqual(data["score"], 0, p.stdout)
        oob, leak = data["tests"]
        self.assertEqual(oob["status"], "failed")
        self.assertIn("crashed (sanitizer)", oob["output"])
        self.assertIn("AddressSanitizer: heap-buffer-overflow", oob["output"])
        self.assertIn("memory.cpp:8", oob["output"])  # the line of the write
        self.assertIn("one element past its end", oob["output"])
        self.assertIn("LeakSanitizer: detected memory leaks", leak["output"])
        self.assertIn("never freed", leak["output"])

    def test_build_then_run(self):
        p, data = self.grade("--cmake-arg=-DBROKEN=OFF")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(data["score"], 10, p.stdout)
        self.assertEqual([t["name"] for t in data["tests"]], ["x.one", "x.two", "x.empty"])
        self.assertIn('test case "checks nothing" ended without checking anything', data["tests"][2]["output"])

    def test_build_failure_gives_one_failed_build_entry_with_the_errors(self):
        p, data = self.grade("--cmake-arg=-DBROKEN=ON", build="build-broken")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(data["score"], 0)
        self.assertIsInstance(data["execution_time"], (int, float))
        self.assertEqual(len(data["tests"]), 1)
        t = data["tests"][0]
        self.assertEqual((t["name"], t["status"], t["score"], t["max_score"]), ("build", "failed", 0.0, 15.0))
        self.assertIn("undeclared_name_in_student_code", t["output"])
        self.assertIn("error", t["output"])
        self.assertIn("BUILD FAILED", p.stdout)


WRAPPED = """-------------------------------------------------------------------------------
oracle: every parameter gradient matches PyTorch autograd
-------------------------------------------------------------------------------
/src/tests/oracle/test_oracle.cpp:200
...............................................................................

/src/tests/oracle/test_oracle.cpp:94: FAILED:
  CHECK( _c.ok )
with expansion:
  false
with messages:
  tolerance |got - ref| <= 1e-5 * max|ref| + 1e-8 = 1.63392e-06 (max|ref| = 0.
  162392)
  gradient transformer.wpe.weight: MISMATCH over 512 elements; max abs err 0.
  056332, max rel err 81.9003; 512 outside tolerance, first at index 0: got -0.
  0680538, expected -0.0733551

/src/tests/precision/test_mixed_model.cpp:82: FAILED:
  {Unknown expression after the reported line}
due to unexpected exception with message:
  Lab 03: implement float_to_bf16 (see labs/03-mixed-precision/README.md,
  section 2)

===============================================================================
test cases: 1 | 1 failed
"""


class CatchParsing(unittest.TestCase):
    """Catch2 wraps messages at 80 columns; the grader joins them again for the hint."""

    def test_another_ranks_banner_is_not_part_of_the_test_case_name(self):
        sys.path.insert(0, str(ROOT / "tools"))
        import grade
        out = ("-" * 79 + "\n" + "~" * 79 + "\ntest_comm_mpi is a Catch v2.13.10 host application.\n"
               "Run with -? for options\n\nring reduce-scatter - float\n" + "-" * 79 + "\n"
               "/src/tests/comm/test_ring.cpp:98: FAILED:\n  {Unknown expression after the reported line}\n"
               "due to a fatal error condition:\n  SIGTERM - Termination request signal\n")
        self.assertEqual(grade.parse_failures(out)[0].test_case, "ring reduce-scatter - float")
        # mpiexec's message box, then a blank line and the banner, before the real header
        boxed = ("-" * 74 + "\nMPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD\nwith errorcode 3.\n\n"
                 "NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.\nYou may or may not see output "
                 "from other processes, depending on\nexactly when Open MPI kills them.\n" + "-" * 74 + "\n\n"
                 + out[80:])
        self.assertEqual(grade.parse_failures("-" * 79 + "\n" + boxed)[0].test_case, "ring reduce-scatter - float")

    def test_unwraps_messages(self):
        sys.path.insert(0, str(ROOT / "tools"))
        import grade
        failures = grade.parse_failures(WRAPPED)
        self.assertEqual(len(failures), 2)
        self.assertEqual(failures[1].messages,
                         ["Lab 03: implement float_to_bf16 (see labs/03-mixed-precision/README.md, section 2)"])
        f = failures[0]
        self.assertEqual(f.where, "/src/tests/oracle/test_oracle.cpp:94")
        self.assertEqual(f.test_case, "oracle: every parameter gradient matches PyTorch autograd")
        self.assertEqual(f.messages, [
            "tolerance |got - ref| <= 1e-5 * max|ref| + 1e-8 = 1.63392e-06 (max|ref| = 0.162392)",
            "gradient transformer.wpe.weight: MISMATCH over 512 elements; max abs err 0.056332, max rel err "
            "81.9003; 512 outside tolerance, first at index 0: got -0.0680538, expected -0.0733551"])
        self.assertTrue(grade.first_message(f).startswith("gradient transformer.wpe.weight: MISMATCH"))


class SanitizeSettings(unittest.TestCase):
    """--sanitize builds as the debug-asan preset says and sets the sanitizers' options per test."""

    def test_the_preset_is_read_from_cmake_presets(self):
        sys.path.insert(0, str(ROOT / "tools"))
        import grade
        defs = grade.sanitize_cache_variables(ROOT)
        self.assertEqual(defs["SCALELAB_SANITIZE"], "ON")
        self.assertEqual(defs["SCALELAB_CUDA"], "OFF")
        with tempfile.TemporaryDirectory() as tmp:
            with self.assertRaisesRegex(grade.GradingError, "CMakePresets.json"):
                grade.sanitize_cache_variables(Path(tmp))
            (Path(tmp) / "CMakePresets.json").write_text('{"configurePresets": [{"name": "release"}]}')
            with self.assertRaisesRegex(grade.GradingError, "no configure preset named 'debug-asan'"):
                grade.sanitize_cache_variables(Path(tmp))

    def test_each_kind_of_report_gets_its_own_advice(self):
        sys.path.insert(0, str(ROOT / "tools"))
        import grade
        def advice(report):
            return grade.sanitizer_advice(grade.sanitizer_report(report)[0])
        self.assertIn("one element past its end", advice("==1==ERROR: AddressSanitizer: heap-buffer-overflow on address"))
        self.assertIn("after its owner freed it", advice("==1==ERROR: AddressSanitizer: heap-use-after-free on address"))
        self.assertIn("freed twice", advice("==1==ERROR: AddressSanitizer: attempting double-free on 0x1 in thread T0"))
        self.assertIn("wrong call", advice("==1==ERROR: AddressSanitizer: alloc-dealloc-mismatch (operator new [] vs"))
        self.assertIn("never freed", advice("==1==ERROR: LeakSanitizer: detected memory leaks"))
        self.assertIn("undefined", advice("/s/labs/x.cpp:3:1: runtime error: signed integer overflow"))

    def test_leaks_are_checked_in_single_process_tests_only(self):
        sys.path.insert(0, str(ROOT / "tools"))
        import grade
        self.assertEqual(grade.sanitize_env({}, 0)["ASAN_OPTIONS"], "detect_leaks=1")
        self.assertEqual(grade.sanitize_env({}, 2)["ASAN_OPTIONS"], "detect_leaks=0")
        mine = grade.sanitize_env({"ASAN_OPTIONS": "detect_leaks=0", "PATH": "/bin"}, 0)
        self.assertEqual(mine["ASAN_OPTIONS"], "detect_leaks=1:detect_leaks=0")  # the caller's come last, and win
        self.assertEqual(mine["UBSAN_OPTIONS"], "print_stacktrace=1")
        self.assertEqual(mine["PATH"], "/bin")


class StudentFiles(unittest.TestCase):
    """A submission's files are found by path or by a unique name; others are ignored."""

    def test_stage(self):
        sys.path.insert(0, str(ROOT / "tools"))
        import grade
        tmp = Path(tempfile.mkdtemp(prefix="grade-stage-"))
        try:
            root = tmp / "repo"
            lab = root / "labs" / "00-naive"
            for rel in ["model/a.cpp", "model/layers/b.cpp", "optim/c.cpp"]:
                (lab / rel).parent.mkdir(parents=True, exist_ok=True)
                (lab / rel).write_text(f"skeleton {rel}\n")
            sub = tmp / "sub"
            (sub / "labs/00-naive/model").mkdir(parents=True)
            (sub / "labs/00-naive/model/a.cpp").write_text("student a\n")
            (sub / "b.cpp").write_text("student b\n")
            (sub / "evil.cpp").write_text("int main() {}\n")
            stage = tmp / "stage"
            notes = grade.stage_student_files("00", root, sub, stage)
            self.assertEqual((stage / "model/a.cpp").read_text(), "student a\n")
            self.assertEqual((stage / "model/layers/b.cpp").read_text(), "student b\n")
            self.assertEqual((stage / "optim/c.cpp").read_text(), "skeleton optim/c.cpp\n")
            self.assertFalse((stage / "evil.cpp").exists())
            text = "\n".join(notes)
            self.assertIn("optim/c.cpp: not in the submission", text)
            self.assertIn("evil.cpp: ignored", text)
            # Staging the next submission rewrites only what changed (the build recompiles only that).
            os.utime(stage / "optim/c.cpp", (1, 1))
            (sub / "b.cpp").write_text("student b, second try\n")
            grade.stage_student_files("00", root, sub, stage)
            self.assertEqual((stage / "optim/c.cpp").stat().st_mtime, 1)
            self.assertEqual((stage / "model/layers/b.cpp").read_text(), "student b, second try\n")
        finally:
            shutil.rmtree(tmp)


class CoverageAccounting(unittest.TestCase):
    """A wrong function must cost exactly the tests that cover it, and a failing whole-model test
    must send the student to the narrower failing test first."""

    @staticmethod
    def outcome(grade, name, functions, uses=(), passed=False):
        test = grade.GradedTest(name=name, lab="00", points=2, timeout=1, binary="b", spec="s",
                                functions=list(functions), uses=list(uses))
        return grade.Outcome(test=test, status="passed" if passed else "failed", score=2 if passed else 0,
                             hint="MISMATCH", details="Where to look: ...")

    def test_narrower_failure_comes_first_in_the_hint(self):
        sys.path.insert(0, str(ROOT / "tools"))
        import grade
        unit = self.outcome(grade, "lab00.fd_layernorm", ["layernorm_backward"])
        model = self.outcome(grade, "lab00.fd_model", ["model_backward"], uses=["layernorm_backward", "gelu_backward"])
        other = self.outcome(grade, "lab00.fd_gelu", ["gelu_backward"], passed=True)
        grade.point_to_narrower_failures([unit, model, other])
        self.assertTrue(model.details.startswith("Start with lab00.fd_layernorm (layernorm_backward)"), model.details)
        self.assertTrue(model.hint.startswith("start with lab00.fd_layernorm"), model.hint)
        self.assertEqual(unit.hint, "MISMATCH")  # nothing narrower than the unit test itself
        self.assertNotIn("fd_gelu", model.details)  # it passed

    def test_a_staged_submission_s_sanitizer_frame_reads_as_its_lab_folder(self):
        sys.path.insert(0, str(ROOT / "tools"))
        import grade
        report = ("==7==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x1\n"
                  "    #0 0x1 in scalelab::helper(float*) /elsewhere/reference/core/x.cpp:3:1\n"
                  "    #1 0x2 in scalelab::adamw_step(float*) /ag/build/student-lab00/optim/adamw.cpp:40:5\n")
        renames = {"/ag/build/student-lab00/": "labs/00-naive/"}
        self.assertEqual(grade.sanitizer_report(report, renames),
                         ("AddressSanitizer: heap-buffer-overflow", "scalelab::adamw_step (labs/00-naive/optim/adamw.cpp:40)"))
        ub = "/ag/build/student-lab00/optim/adamw.cpp:41:7: runtime error: signed integer overflow\n"
        self.assertEqual(grade.sanitizer_report(ub, renames),
                         ("UndefinedBehaviorSanitizer: signed integer overflow", "labs/00-naive/optim/adamw.cpp:41"))

    def test_a_stub_that_threw_points_at_its_own_test(self):
        sys.path.insert(0, str(ROOT / "tools"))
        import grade
        plan = self.outcome(grade, "lab04.ddp_buckets", ["plan_buckets"])
        overlap = self.outcome(grade, "lab04.ddp_overlap", ["ddp_launch_ready_buckets"])
        equal = self.outcome(grade, "lab04.ddp_equal_2ranks", ["ddp_naive", "ddp_launch_ready_buckets"])
        equal.stub_messages = ["Lab 04: implement plan_buckets (see labs/04-data-parallel/README.md, section 6)"]
        grade.point_to_narrower_failures([plan, overlap, equal])
        self.assertTrue(equal.details.startswith("Start with lab04.ddp_buckets (plan_buckets)"), equal.details)

    def test_expect_lose_accepts_exactly_the_covering_tests(self):
        sys.path.insert(0, str(ROOT / "tools"))
        import grade
        unit = self.outcome(grade, "u", ["layernorm_backward"])
        model = self.outcome(grade, "m", ["model_backward"], uses=["layernorm_backward"])
        other = self.outcome(grade, "o", ["gelu_backward"], passed=True)
        self.assertEqual(grade.unexpected_losses([unit, model, other], "layernorm_backward"), [])
        model_passed = self.outcome(grade, "m", ["model_backward"], uses=["layernorm_backward"], passed=True)
        self.assertEqual(grade.unexpected_losses([unit, model_passed], "layernorm_backward"),
                         ["m passed although it covers layernorm_backward"])
        other_failed = self.outcome(grade, "o", ["gelu_backward"])
        self.assertEqual(grade.unexpected_losses([unit, other_failed], "layernorm_backward"),
                         ["o failed although it does not cover layernorm_backward"])

    def test_expect_keep_names_covering_tests_that_must_pass(self):
        sys.path.insert(0, str(ROOT / "tools"))
        import grade
        equal = self.outcome(grade, "lab01.equal", ["accumulate_gradients"])
        memory = self.outcome(grade, "lab01.memory", ["accumulate_gradients"], passed=True)
        other = self.outcome(grade, "lab01.other", ["something_else"], passed=True)
        self.assertEqual(grade.unexpected_losses([equal, memory, other], "accumulate_gradients", ["lab01.memory"]), [])
        memory_failed = self.outcome(grade, "lab01.memory", ["accumulate_gradients"])
        self.assertEqual(grade.unexpected_losses([equal, memory_failed], "accumulate_gradients", ["lab01.memory"]),
                         ["lab01.memory failed although this mistake is expected to keep it (--expect-keep)"])
        self.assertEqual(grade.unexpected_losses([equal, memory, other], "accumulate_gradients", ["lab01.other"]),
                         ["--expect-keep lab01.other: lab01.other does not cover accumulate_gradients (it must pass "
                          "anyway)", "lab01.memory passed although it covers accumulate_gradients"])
        self.assertEqual(grade.unexpected_losses([equal, memory], "accumulate_gradients", ["lab01.typo"]),
                         ["--expect-keep lab01.typo matches no graded test",
                          "lab01.memory passed although it covers accumulate_gradients"])
        # A mistake that loses nothing proves nothing.
        self.assertEqual(grade.unexpected_losses([memory, other], "accumulate_gradients", ["lab01.memory"]),
                         ["no test failed"])

    def test_skip_unlinked_finds_the_binaries_without_the_changed_object(self):
        sys.path.insert(0, str(ROOT / "tools"))
        import grade
        if not all(shutil.which(t) for t in ("cc", "ar", "nm")):
            self.skipTest("needs cc, ar and nm")
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            objdir = d / "reference" / "CMakeFiles" / "scalelab.dir" / "__" / "student-lab04" / "dist"
            objdir.mkdir(parents=True)
            (d / "ddp.c").write_text("int plan_buckets(int x) { return x + 1; }\n")
            (d / "ring.c").write_text("int ring_all_reduce(int x) { return 2 * x; }\n")
            (d / "uses_ddp.c").write_text("int plan_buckets(int);\nint main(void) { return plan_buckets(-1); }\n")
            (d / "uses_ring.c").write_text("int ring_all_reduce(int);\nint main(void) { return ring_all_reduce(0); }\n")
            ddp_o, ring_o = objdir / "ddp.cpp.o", d / "ring.o"
            run = lambda *cmd: subprocess.run(cmd, check=True, cwd=d, capture_output=True)  # noqa: E731
            run("cc", "-c", "ddp.c", "-o", str(ddp_o))
            run("cc", "-c", "ring.c", "-o", str(ring_o))
            run("ar", "rcs", "libscalelab.a", str(ddp_o), str(ring_o))  # static: objects linked on demand
            run("cc", "uses_ddp.c", "libscalelab.a", "-o", "test_ddp")
            run("cc", "uses_ring.c", "libscalelab.a", "-o", "test_comm")
            binaries = {"test_ddp": d / "test_ddp", "test_comm": d / "test_comm"}
            self.assertEqual(grade.unlinked_binaries(d, "04", ["dist/ddp.cpp"], binaries),
                             {"test_comm": "test_comm does not link dist/ddp.cpp"})
            # Unproven counts as linked: an object that is not found, or no changed file at all.
            self.assertEqual(grade.unlinked_binaries(d, "04", ["comm/ring.cpp"], binaries), {})
            self.assertEqual(grade.unlinked_binaries(d, "04", [], binaries), {})


class ConfigureOnlyWhenNeeded(unittest.TestCase):
    """grading one submission after another in one build directory configures again only when
    the settings, the lab folders or the set of student files changed, or another cmake run
    rewrote the cache."""

    def test_the_stamp_and_the_cache_decide(self):
        sys.path.insert(0, str(ROOT / "tools"))
        import grade
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            (d / "src" / "labs" / "01-accumulation").mkdir(parents=True)
            stage = d / "stage"
            (stage / "train").mkdir(parents=True)
            (stage / "train" / "accumulate.cpp").write_text("a")
            build = d / "build"
            build.mkdir()
            (build / "CMakeCache.txt").write_text("cache")
            defs = {"SCALELAB_LABS": "01", "SCALELAB_LAB_DIR_01": str(stage)}
            cmd = ["cmake", "-S", "src", "-B", str(build), "-DSCALELAB_LABS=01"]
            stamp = grade.configure_stamp(d / "src", cmd, defs)
            self.assertEqual(stamp["files"], {"SCALELAB_LAB_DIR_01": ["train/accumulate.cpp"]})
            self.assertEqual(stamp["lab_dirs"], ["01-accumulation"])
            original = grade.executable_targets
            grade.executable_targets = lambda _: {"test_accumulation": build / "test_accumulation"}
            try:
                self.assertFalse(grade.configured_alike(build, stamp))  # never configured by grade.py
                grade.write_json_atomically(build / grade.CONFIGURE_STAMP, {
                    "stamp": stamp, "cache_mtime_ns": (build / "CMakeCache.txt").stat().st_mtime_ns})
                self.assertTrue(grade.configured_alike(build, stamp))
                (stage / "train" / "accumulate.cpp").write_text("b")  # new content: the build sees it
                self.assertTrue(grade.configured_alike(build, grade.configure_stamp(d / "src", cmd, defs)))
                (stage / "train" / "extra.cpp").write_text("c")  # a new file may replace a reference file
                self.assertFalse(grade.configured_alike(build, grade.configure_stamp(d / "src", cmd, defs)))
                self.assertFalse(grade.configured_alike(build, grade.configure_stamp(d / "src", cmd + ["-DX=1"], defs)))
                (stage / "train" / "extra.cpp").unlink()
                time.sleep(0.01)
                (build / "CMakeCache.txt").write_text("another cmake run")
                os.utime(build / "CMakeCache.txt", ns=(1, 1))
                self.assertFalse(grade.configured_alike(build, stamp))
            finally:
                grade.executable_targets = original


if __name__ == "__main__":
    unittest.main(verbosity=2)
