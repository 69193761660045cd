#!/usr/bin/env python3
"""Fuzz of the grader's test lists (tests/grading/*.json, read by tools/grade.py's load_tests):
mutated copies of a real list (truncated text, bytes that are not UTF-8, random flips, and every
field given a value of the wrong type or range) must either load as well-formed tests or be
refused with one GradingError naming the file, and `grade.py --list` must then exit 2 with one
line, never a traceback. Mutations come from a fixed seed. Standard library only."""
import copy
import json
import math
import random
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import grade  # noqa: E402

SOURCE = ROOT / "tests" / "grading" / "lab05-pipeline.json"

# A value of each kind, to put where another kind belongs.
ODD_VALUES = [None, True, -1, 0, 1e308, float("nan"), float("inf"), "", "x", [], ["a", 1], {}, {"a": 1}]


def mutants(text):
    """(name, text) pairs: the mutations of one valid test list."""
    out = []
    for n in (0, 1, 2, len(text) // 3, len(text) // 2, len(text) - 2):
        out.append((f"truncated to {n} characters", text[:n]))
    rng = random.Random(20240520)
    for i in range(60):
        chars = list(text)
        for _ in range(rng.randint(1, 4)):
            chars[rng.randrange(len(chars))] = rng.choice('{}[]":,0-.ex \\\x00')
        out.append((f"random flips #{i}", "".join(chars)))
    data = json.loads(text)
    for top in ODD_VALUES:
        out.append((f"top level {top!r}", json.dumps(top)))
        out.append((f"tests = {top!r}", json.dumps({"tests": top})))
    fields = sorted({k for e in data["tests"] for k in e} | {"ranks", "labels", "uses", "visibility"})
    for field in fields:
        for value in ODD_VALUES:
            d = copy.deepcopy(data)
            d["tests"][0][field] = value
            out.append((f"tests[0].{field} = {value!r}", json.dumps(d)))
    for value in ODD_VALUES:
        d = copy.deepcopy(data)
        d["tests"][1] = value
        out.append((f"tests[1] = {value!r}", json.dumps(d)))
    return out


def well_formed(t):
    """'' when a loaded test has the types the grader relies on, else what is wrong."""
    checks = [
        (isinstance(t.name, str) and t.name, "name"),
        (isinstance(t.lab, str) and t.lab.isdigit(), "lab"),
        (isinstance(t.points, float) and math.isfinite(t.points) and t.points >= 0, "points"),
        (isinstance(t.timeout, float) and math.isfinite(t.timeout) and t.timeout > 0, "timeout"),
        (isinstance(t.binary, str) and t.binary, "binary"),
        (isinstance(t.spec, str) and t.spec, "spec"),
        (isinstance(t.ranks, int) and t.ranks >= 0, "ranks"),
        (all(isinstance(x, str) for x in t.labels + t.functions + t.uses), "labels/functions/uses"),
        (isinstance(t.hint, str), "hint"),
    ]
    return ", ".join(what for ok, what in checks if not ok)


class GradeJsonFuzz(unittest.TestCase):
    def test_mutated_lists_load_or_fail_with_one_error_naming_the_file(self):
        text = SOURCE.read_text(encoding="utf-8")
        cases = mutants(text)
        self.assertGreater(len(cases), 200)
        bad = []
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            path = d / "lab05-pipeline.json"
            self.assertEqual(len(grade.load_tests([SOURCE.parent])) > 0, True)
            for name, mutated in cases:
                path.write_text(mutated, encoding="utf-8", errors="surrogateescape")
                try:
                    for t in grade.load_tests([d]):
                        wrong = well_formed(t)
                        if wrong:
                            bad.append(f"{name}: loaded a test with a bad {wrong}: {t!r}"[:300])
                            break
                except grade.GradingError as e:
                    if str(path) not in str(e) or "\n" in str(e):
                        bad.append(f"{name}: an error that does not name the file on one line: {e}")
                except Exception as e:  # noqa: BLE001 -- anything else is the bug this test looks for
                    bad.append(f"{name}: {type(e).__name__}: {e}"[:300])
            # Bytes that are not UTF-8 at all.
            path.write_bytes(b'{"tests": [\xff\xfe]}')
            try:
                grade.load_tests([d])
                bad.append("invalid UTF-8: loaded")
            except grade.GradingError:
                pass
            except Exception as e:  # noqa: BLE001
                bad.append(f"invalid UTF-8: {type(e).__name__}: {e}")
        self.assertEqual(bad, [], f"{len(bad)} of {len(cases)} mutated lists handled badly; the first:\n  " +
                         "\n  ".join(bad[:8]))

    def test_the_command_line_prints_one_line_not_a_traceback(self):
        with tempfile.TemporaryDirectory() as tmp:
            for mutated in ['{"tests": [{"name": ["x"], "lab": "05"}]}', '{"tests": [5]}',
                            '{"tests": [{"name": "a", "lab": "05", "points": 1, "timeout": 1, "binary": "b", '
                            '"spec": "s", "ranks": "two"}]}']:
                (Path(tmp) / "x.json").write_text(mutated)
                r = subprocess.run([sys.executable, str(ROOT / "tools" / "grade.py"), "05", "--list",
                                    "--grading-dir", tmp], capture_output=True, text=True, timeout=60)
                self.assertEqual(r.returncode, 2, f"{mutated}: exit {r.returncode}\n{r.stdout}{r.stderr}")
                self.assertNotIn("Traceback", r.stderr, mutated)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, f"{mutated}: {r.stderr}")
                self.assertIn("x.json", r.stderr)


if __name__ == "__main__":
    unittest.main()
