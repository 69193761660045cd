#!/usr/bin/env python3
"""Tests of tools/mutate_lab.py (standard library only): which statements and operators of a lab
region become mutants, on a synthetic file; the mutants of every real lab; the arguments' errors;
and the verdicts, with a fake grader standing in for tools/grade.py."""
import contextlib
import io
import json
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import labgen  # noqa: E402
import mutate_lab  # noqa: E402

# A region with each case the generator must tell apart: declarations (kept), a plain call, an
# assignment, a braced loop, an unbraced if, an if/else (its branches, not the if), a lambda, a
# bare return, a returned value, template brackets and a unary minus (no operator there), an
# operator inside a comment and a string (not code), and std::min.
SOURCE = textwrap.dedent("""\
    #include <algorithm>
    #include <vector>

    namespace scalelab {

    float layer(std::vector<float>& v, int n, bool flag) {
      float outside = 1 + 2;
      // LAB 00 BEGIN layer: section 1
      const int m = std::min(n, 4);
      Place p = Place::first();
      p = Place::next(p);
      for (int i = 0; i < m; ++i) {
        v[i] += -v[i] * 2;  // not a + b in a comment
      }
      if (flag) v[0] = 1;
      if (m == n) {
        v[1] = 2;
      } else {
        v[1] = 3;
      }
      auto twice = [&](int k) { return 2 * k; };
      log("a < b");
      if (m > 3) return;
      return outside / twice(m);
      // LAB 00 END
    }

    }  // namespace scalelab
    """)


def mutants(kinds=mutate_lab.KINDS):
    regions = labgen.scan_text(SOURCE, "model/layer.cpp")
    return mutate_lab.mutants_of_file(SOURCE, "model/layer.cpp", regions, tuple(kinds))


class GeneratorTest(unittest.TestCase):
    def test_deletions_are_the_statements_that_compile_without(self):
        deleted = [m.before for m in mutants(["delete"])]
        self.assertEqual(deleted, [
            "p = Place::next(p);",
            "for (int i = 0; i < m; ++i) { v[i] += -v[i] * 2; // not a + b in a comment }",
            "v[i] += -v[i] * 2;",
            "if (flag) v[0] = 1;",
            "v[1] = 2;",
            "v[1] = 3;",
            'log("a < b");',
            "if (m > 3) return;",
        ])  # kept: the declarations, the if with an else, the lambda, `return outside / twice(m);`

    def test_braces_inside_brackets_or_parentheses_are_not_blocks(self):
        # Lab 05's `inbox_[{grad, mb, chunk}] = std::move(in);` was cut at its brace initializer:
        # the mutant deleted only `] = std::move(in);` and did not compile.
        text = "  inbox_[{g, mb}] = std::move(in);\n  call({1, 2});\n  if (x) { y = 1; }\n"
        spans = mutate_lab.statements(text, 0, len(text))
        self.assertEqual([text[a:b] for a, b in spans],
                         ["inbox_[{g, mb}] = std::move(in);", "call({1, 2});", "if (x) { y = 1; }", "y = 1;"])

    def test_operator_swaps_only_in_code(self):
        lines = SOURCE.splitlines()
        changed = []
        for m in mutants(["operator"]):
            self.assertIn(m.before.strip(), lines[m.line - 1])
            changed.append((m.line, m.apply(SOURCE).splitlines()[m.line - 1].strip()))
        self.assertEqual(changed, [
            (9, "const int m = std::max(n, 4);"),
            (12, "for (int i = 0; i <= m; ++i) {"),
            (13, "v[i] -= -v[i] * 2;  // not a + b in a comment"),
            (13, "v[i] = -v[i] * 2;  // not a + b in a comment"),
            (13, "v[i] += -v[i] / 2;  // not a + b in a comment"),
            (16, "if (m != n) {"),
            (21, "auto twice = [&](int k) { return 2 / k; };"),
            (23, "if (m >= 3) return;"),
            (24, "return outside * twice(m);"),
        ])  # not mutated: <float>, the unary minus, `a + b` in the comment, `a < b` in the string, `1 + 2` outside

    def test_apply_changes_exactly_the_span(self):
        for m in mutants():
            changed = m.apply(SOURCE)
            self.assertEqual(changed[:m.start], SOURCE[:m.start])
            self.assertEqual(changed[m.start + len(m.replacement):], SOURCE[m.stop:])
            self.assertNotEqual(changed, SOURCE)

    def test_every_lab_has_mutants_of_both_kinds(self):
        regions = labgen.all_regions(ROOT / "reference")
        for lab in labgen.LAB_DIRS:
            for kind in mutate_lab.KINDS:
                found = mutate_lab.lab_mutants(ROOT, [r for r in regions if r.lab == lab], (kind,))
                self.assertGreater(len(found), 0, f"lab {lab} has no {kind} mutant")
                self.assertTrue(all(m.kind == kind for m in found))
                self.assertEqual([m.number for m in found], list(range(1, len(found) + 1)))


def run_main(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = mutate_lab.main(list(argv))
    return code, out.getvalue(), err.getvalue()


class ArgumentTest(unittest.TestCase):
    def test_list(self):
        code, out, err = run_main("01", "--list")
        self.assertEqual(code, 0, err)
        self.assertIn("accumulate_gradients", out)
        self.assertRegex(err, r"\d+ mutants")

    def test_bad_arguments_name_the_setting(self):
        code, _, err = run_main("42", "--list")
        self.assertEqual(code, 2)
        self.assertIn("unknown lab 42", err)
        code, _, err = run_main("01", "--kinds", "swap")
        self.assertEqual(code, 2)
        self.assertIn("--kinds swap: the kinds are delete, operator", err)
        code, _, err = run_main("01", "--functions", "layernorm_backward")
        self.assertEqual(code, 2)
        self.assertIn("--functions layernorm_backward: not a function of lab 01", err)
        self.assertIn("accumulate_gradients", err)


# Stands in for tools/grade.py: a submission without "+= n" or with "-=" loses test b, one with
# " * 2" does not compile, anything else earns full marks. It records the time limits it was given.
FAKE_GRADER = textwrap.dedent("""\
    import json, sys
    from pathlib import Path
    args = sys.argv[1:]
    sub = Path(args[args.index("--student-dir") + 1])
    results = Path(args[args.index("--results") + 1])
    grading = Path(args[args.index("--grading-dir") + 1])
    build = Path(args[args.index("--build-dir") + 1])
    build.mkdir(parents=True, exist_ok=True)
    limits = [t["timeout"] for f in sorted(grading.glob("*.json")) for t in json.loads(f.read_text())["tests"]]
    (build / "limits.json").write_text(json.dumps(limits))
    (build / "sanitize.txt").write_text(str("--sanitize" in args))
    only = args[args.index("--only") + 1] if "--only" in args else ""
    with open(build / "runs.txt", "a") as runs:
        runs.write((only or "all") + "\\n")
    text = "".join(p.read_text() for p in sub.rglob("*.cpp"))
    wrong = "-=" in text or "+= n" not in text
    if " * 2" in text:
        tests = [{"name": "build", "score": 0, "max_score": 3, "status": "failed"}]
    else:
        tests = [{"name": "lab00.a", "score": 2, "max_score": 2, "status": "passed"},
                 {"name": "lab00.b", "score": 0 if wrong else 1, "max_score": 1,
                  "status": "failed" if wrong else "passed"}]
        tests = [t for t in tests if t["name"].startswith(only)]
    results.write_text(json.dumps({"score": sum(t["score"] for t in tests), "tests": tests}))
    """)


class VerdictTest(unittest.TestCase):
    def test_killed_survived_not_compiled(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "reference" / "model").mkdir(parents=True)
            (root / "reference" / "model" / "layer.cpp").write_text(
                "void f(float* v, int n) {\n  // LAB 00 BEGIN f: section 1\n"
                "  v[0] += n;\n  v[1] = v[2] / 2;\n  // LAB 00 END\n}\n")
            (root / "tools").mkdir()
            (root / "tools" / "grade.py").write_text(FAKE_GRADER)
            (root / "tests" / "grading").mkdir(parents=True)
            (root / "tests" / "grading" / "lab00.json").write_text(json.dumps({"tests": [
                {"name": "lab00.a", "lab": "00", "points": 2, "timeout": 300, "binary": "t", "spec": "[a]",
                 "functions": ["f"]},
                {"name": "lab00.b", "lab": "00", "points": 1, "timeout": 20, "binary": "t", "spec": "[b]",
                 "functions": ["f"]}]}))
            report = root / "report.md"
            code, out, err = run_main("00", "--source-dir", str(root), "--time-limit", "30", "--report", str(report))
            self.assertEqual(code, 0, err)
            rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| ") and "---" not in line]
            self.assertEqual([(r[3], r[4], r[5]) for r in rows[1:]], [
                ("delete `v[0] += n;`", "killed", "lab00.b |"),
                ("delete `v[1] = v[2] / 2;`", "**survived**", " |"),
                ("`v[0] += n;` -> `v[0] -= n;`", "killed", "lab00.b |"),
                ("`v[0] += n;` -> `v[0] = n;`", "killed", "lab00.b |"),
                ("`v[1] = v[2] / 2;` -> `v[1] = v[2] * 2;`", "not compiled", " |"),
            ], out)
            self.assertIn("5 mutants: 3 killed, 1 survived, 1 not compiled.", out)
            self.assertEqual(report.read_text(), out)
            build = root / "build" / "mutate-00"
            # Test by test, f's tests first (b, then a, whose limit is longer), stopping at the
            # first one lost; a mutant that does not compile stops at its first build.
            self.assertEqual((build / "runs.txt").read_text().split(),
                             ["lab00.b", "lab00.b", "lab00.a", "lab00.b", "lab00.b", "lab00.b"])
            # every time limit capped at --time-limit, the shorter ones kept
            self.assertEqual(json.loads((build / "limits.json").read_text()), [30, 20])

            (build / "runs.txt").unlink()
            code, out, err = run_main("00", "--source-dir", str(root), "--whole", "--functions", "f", "--kinds",
                                      "delete")
            self.assertEqual(code, 0, err)
            rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| ") and "---" not in line]
            self.assertEqual([(r[4], r[5], r[6]) for r in rows[1:]],
                             [("killed", "2/3", "lab00.b |"), ("**survived**", "3/3", " |")], out)
            self.assertEqual((build / "runs.txt").read_text().split(), ["all", "all"])
            self.assertEqual((build / "sanitize.txt").read_text(), "False")

            # --sanitize reaches the grader, in a build directory of its own.
            code, _, err = run_main("00", "--source-dir", str(root), "--sanitize", "--functions", "f", "--kinds",
                                    "delete")
            self.assertEqual(code, 0, err)
            self.assertEqual((root / "build" / "mutate-00-sanitize" / "sanitize.txt").read_text(), "True")

            # --numbers: only those mutants (numbered as in the first run), and nothing for a bad number.
            (build / "runs.txt").unlink()
            code, out, err = run_main("00", "--source-dir", str(root), "--numbers", "2,4")
            self.assertEqual(code, 0, err)
            rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| ") and "---" not in line]
            self.assertEqual([(r[0], r[4]) for r in rows[1:]], [("| 2", "**survived**"), ("| 4", "killed")], out)
            for bad in ("6", "x"):
                code, _, err = run_main("00", "--source-dir", str(root), "--numbers", bad)
                self.assertEqual(code, 2)
                self.assertIn(f"--numbers {bad}", err)

            # A hidden-test list the grader would refuse: one error naming the file, nothing graded.
            hidden = root / "hidden"
            hidden.mkdir()
            (hidden / "lab00-hidden.json").write_text('{"tests": [{"name": "lab00.h", "lab": "00"}]}')
            (build / "runs.txt").unlink()
            code, _, err = run_main("00", "--source-dir", str(root), "--hidden-tests", str(hidden))
            self.assertEqual(code, 2)
            self.assertIn("mutate_lab: ", err)
            self.assertIn("lab00-hidden.json", err)
            self.assertNotIn("Traceback", err)
            self.assertFalse((build / "runs.txt").exists())


if __name__ == "__main__":
    unittest.main(verbosity=2)
