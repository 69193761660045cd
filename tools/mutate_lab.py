#!/usr/bin/env python3
"""Tests the graded tests: grades small mistakes in the reference solution of one lab and lists the
ones that still earn full marks.

    python3 tools/mutate_lab.py 05 --list                 the mutants, without grading them
    python3 tools/mutate_lab.py 05                        grade every mutant of lab 05
    python3 tools/mutate_lab.py 06 --kinds operator --functions tp_vocab_loss
    python3 tools/mutate_lab.py 00 --hidden-tests /path/to/hidden --report lab00-mutants.md
    python3 tools/mutate_lab.py 06 --sanitize --functions vocab_parallel_cross_entropy_forward
    python3 tools/mutate_lab.py 06 --kinds operator --numbers 1,7,11    only these (numbered as --list)

A mutant is the reference solution of the lab with one change inside one of its
`// LAB NN BEGIN ... END` regions:
  delete    one statement left out (a plain statement, or a whole `for`/`if`/`while` with its body);
            declarations and `return value;` are kept, as leaving them out cannot compile
  operator  one operator or name swapped: < and <=, > and >=, + and -, * and /, == and !=,
            && and ||, += and -= (and += to =), std::min and std::max, true and false

Each mutant is graded exactly as a submission (tools/grade.py NN --student-dir), one graded test at
a time (those of the mutated function first) until it loses one, or all at once with --whole (the
score, slower). The time limit of every test in tests/grading is capped at --time-limit seconds
(a mutant that hangs costs that, not the test's full limit; hidden tests keep their own limits).
With --sanitize every mutant is graded under the sanitizers (grade.py --sanitize, time limits
x2 after the cap): a loop one element too far is killed there even when it writes where no test
looks. A mutant is *killed* when it loses points, *survives* when it keeps full marks, and is *not
compiled* when its build fails. A survivor is either a mistake no graded test notices (write a
test, or a hidden test, that does) or an equivalent change (the same program: nothing to do).

Exit status: 0 when every mutant was graded (whatever the verdicts), 2 for a bad argument.
Standard library only, like tools/grade.py.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grade  # noqa: E402  (the graded tests' loader)
import labgen  # noqa: E402  (the lab table, the index of lab regions, the C++ scanning helpers)

KINDS = ("delete", "operator")

# Binary operators are written with a space on each side (tools/check_format.sh), which tells a
# comparison `a < b` from a template argument list `vector<float>` and `a - b` from `-x`.
SPACED_SWAPS = [(" <= ", " < "), (" < ", " <= "), (" >= ", " > "), (" > ", " >= "), (" + ", " - "),
                (" - ", " + "), (" * ", " / "), (" / ", " * "), (" == ", " != "), (" != ", " == "),
                (" && ", " || "), (" || ", " && "), (" += ", " -= "), (" += ", " = "), (" -= ", " += ")]
WORD_SWAPS = [("std::min", "std::max"), ("std::max", "std::min"), ("true", "false"), ("false", "true")]
CONTEXT = 12  # characters either side of an operator in the report
CONTROL = re.compile(r"^(for|if|while)\b")



@dataclasses.dataclass(frozen=True)
class Mutant:
    number: int
    kind: str          # "delete" or "operator"
    function: str      # the lab function whose region holds the change
    rel: str           # path under reference/
    line: int          # 1-based line of the change
    start: int         # offset of the replaced text in the file
    stop: int
    replacement: str
    before: str        # the replaced text (an operator: with some context), one line, for the report
    after: str = ""    # an operator: the same context after the change

    def describe(self) -> str:
        if self.kind == "delete":
            return f"delete `{self.before}`"
        return f"`{self.before}` -> `{self.after}`"

    def apply(self, text: str) -> str:
        return text[:self.start] + self.replacement + text[self.stop:]


def _one_line(text: str, limit: int = 90) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def statements(clean: str, start: int, stop: int) -> list[tuple[int, int]]:
    """(first, past-the-end) offsets of the statements in clean[start:stop] that can be left out:
    plain statements ending in `;` outside parentheses and brackets, and control statements with
    their body (a braced body, or a single statement), except an `if` followed by `else`. Braces
    inside parentheses or brackets (`m[{a, b}] = x;`, `f({a, b});`) are initializers, not blocks."""
    found: list[tuple[int, int]] = []
    paren = 0  # depth of ( and [
    first = None
    i = start
    while i < stop:
        c = clean[i]
        if first is None and not c.isspace() and c not in "{}":
            first = i
        if c in "([":
            paren += 1
        elif c in ")]":
            paren -= 1
        elif paren == 0 and c == ";":
            if first is not None:
                found.append((first, i + 1))
            first = None
        elif paren == 0 and c == "{":
            if first is not None and CONTROL.match(clean[first:i]):
                close = labgen._match_forward(clean, i, "{", "}")
                if i < close < stop and not re.match(r"\s*else\b", clean[close + 1:stop]):
                    found.append((first, close + 1))
            first = None
        elif paren == 0 and c == "}":
            first = None
        i += 1
    return found


def deletable(clean: str, span: tuple[int, int]) -> bool:
    text = clean[span[0]:span[1]].strip()
    declaration = labgen.DECL_RE.match(text.removesuffix(";"))
    if text == ";" or re.match(r"^else\b", text) or (declaration and declaration.group("type") not in labgen.NOT_A_TYPE):
        return False
    return not (text.startswith("return") and text != "return;")


def mutants_of_file(text: str, rel: str, regions: list[labgen.Region], kinds: tuple[str, ...],
                    first_number: int = 1) -> list[Mutant]:
    clean = labgen.strip_comments_and_strings(text)
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    out: list[Mutant] = []

    def add(kind: str, function: str, a: int, b: int, replacement: str) -> None:
        line = next(n for n in range(len(line_starts), 0, -1) if line_starts[n - 1] <= a)
        before, after = _one_line(text[a:b]), ""
        if kind == "operator":  # the operator with its neighbours on the line, to tell it from others there
            left = text[max(line_starts[line - 1], a - CONTEXT):a].lstrip()
            right = text[b:b + CONTEXT].split("\n")[0].rstrip()
            before, after = left + text[a:b] + right, left + replacement + right
        out.append(Mutant(number=first_number + len(out), kind=kind, function=function, rel=rel, line=line,
                          start=a, stop=b, replacement=replacement, before=before, after=after))

    for region in regions:
        start = line_starts[region.begin]        # the line after BEGIN
        stop = line_starts[region.end - 1]       # the END line
        if "delete" in kinds:
            for a, b in statements(clean, start, stop):
                if deletable(clean, (a, b)):
                    add("delete", region.function, a, b, "")
        if "operator" in kinds:
            changes: list[tuple[int, int, str]] = []
            for old, new in SPACED_SWAPS:
                for m in re.finditer(re.escape(old), clean[start:stop]):
                    changes.append((start + m.start(), start + m.end(), new))
            for old, new in WORD_SWAPS:
                for m in re.finditer(r"(?<![\w:])" + re.escape(old) + r"(?!\w)", clean[start:stop]):
                    changes.append((start + m.start(), start + m.end(), new))
            for a, b, new in sorted(changes):
                add("operator", region.function, a, b, new)
    return out


def lab_mutants(root: Path, regions: list[labgen.Region], kinds: tuple[str, ...]) -> list[Mutant]:
    """The mutants of these regions (of reference/), numbered from 1 in file order."""
    out: list[Mutant] = []
    for rel in sorted({r.rel for r in regions}):
        text = (root / "reference" / rel).read_text(encoding="utf-8")
        out += mutants_of_file(text, rel, [r for r in regions if r.rel == rel], kinds, first_number=len(out) + 1)
    return out


def capped_grading_dir(source: Path, into: Path, cap: float) -> None:
    """A copy of tests/grading/*.json with every time limit at most cap seconds."""
    into.mkdir(parents=True, exist_ok=True)
    for path in sorted((source / "tests" / "grading").glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        for t in data.get("tests", []):
            t["timeout"] = min(float(t["timeout"]), cap)
        (into / path.name).write_text(json.dumps(data, indent=1), encoding="utf-8")


@dataclasses.dataclass
class Verdict:
    mutant: Mutant
    status: str        # "killed", "survived", "not compiled"
    lost: list[str]    # the tests that failed (with --whole: all of them; else the first)
    ran: int           # graded tests run
    seconds: float
    score: str = ""    # with --whole: "score/possible"


def likely_first(tests: list[grade.GradedTest], function: str) -> list[grade.GradedTest]:
    """The tests of the mutated function first, then those that use it, then the rest; the
    shorter time limit first within each."""
    def rank(t: grade.GradedTest) -> tuple[int, float]:
        return (0 if function in t.functions else 1 if function in t.uses else 2), t.timeout
    return sorted(tests, key=rank)


def run_grader(root: Path, lab: str, submission: Path, results: Path, grading: Path, args: argparse.Namespace,
               only: str | None) -> dict | None:
    results.unlink(missing_ok=True)
    cmd = [sys.executable, str(root / "tools" / "grade.py"), lab, "--student-dir", str(submission),
           "--build-dir", str(args.build_dir), "--results", str(results), "--quiet", "-j", str(args.jobs),
           "--grading-dir", str(grading)]
    for h in args.hidden_tests:
        cmd += ["--hidden-tests", str(h)]
    if args.sanitize:
        cmd.append("--sanitize")
    if only:
        cmd += ["--only", only]
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return json.loads(results.read_text(encoding="utf-8")) if results.is_file() else None


def grade_mutant(root: Path, lab: str, m: Mutant, files: list[str], work: Path, args: argparse.Namespace,
                 grading: Path, tests: list[grade.GradedTest]) -> Verdict:
    """Grades the mutant test by test, the likeliest to fail first, and stops at the first test it
    loses; with --whole, in one run of every test (its score, but slower: every hang is waited for)."""
    submission = work / "submission"
    shutil.rmtree(submission, ignore_errors=True)
    for rel in files:
        (submission / rel).parent.mkdir(parents=True, exist_ok=True)
        text = (root / "reference" / rel).read_text(encoding="utf-8")
        (submission / rel).write_text(m.apply(text) if rel == m.rel else text, encoding="utf-8")
    started = time.monotonic()
    done: set[str] = set()
    for t in ([None] if args.whole else likely_first(tests, m.function)):
        if t is not None and t.name in done:
            continue
        data = run_grader(root, lab, submission, work / "results.json", grading, args, t and t.name)
        seconds = time.monotonic() - started
        ran = data.get("tests", []) if data else []
        if not data or any(r["name"] == "build" for r in ran):
            return Verdict(m, "not compiled", [], len(done), seconds)
        done |= {r["name"] for r in ran}
        lost = [r["name"] for r in ran if r["status"] != "passed"]
        score = f"{float(data.get('score', 0)):g}/{sum(float(r['max_score']) for r in ran):g}" if args.whole else ""
        if lost:
            return Verdict(m, "killed", lost, len(done), seconds, score)
    return Verdict(m, "survived", [], len(done), time.monotonic() - started, score if args.whole else "")


def report(lab: str, verdicts: list[Verdict], whole: bool) -> str:
    lines = [f"# Lab {lab}: mutants of the reference solution", "",
             "| # | function | where | change | verdict | " + ("score | tests lost |" if whole else "first test lost |"),
             "|---:|---|---|---|---|" + ("---:|---|" if whole else "---|")]
    for v in verdicts:
        m = v.mutant
        lost = ", ".join(v.lost) if len(v.lost) <= 3 else f"{', '.join(v.lost[:3])} and {len(v.lost) - 3} more"
        verdict = f"**{v.status}**" if v.status == "survived" else v.status
        change = m.describe().replace("|", "\\|")
        lines.append(f"| {m.number} | {m.function} | reference/{m.rel}:{m.line} | {change} | {verdict} | "
                     + (f"{v.score} | " if whole else "") + f"{lost} |")
    counts = {s: sum(v.status == s for v in verdicts) for s in ("killed", "survived", "not compiled")}
    lines += ["", f"{len(verdicts)} mutants: {counts['killed']} killed, {counts['survived']} survived, "
                  f"{counts['not compiled']} not compiled."]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    root = labgen.repo_root()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("lab", help="the lab number, e.g. 05")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)} (default: both)")
    p.add_argument("--functions", default="", help="comma-separated lab functions (default: all of the lab)")
    p.add_argument("--list", action="store_true", help="print the mutants and exit")
    p.add_argument("--numbers", default="",
                   help="comma-separated: only the mutants with these numbers, as --list numbers them with the same "
                        "--kinds and --functions (to grade the survivors of an earlier run again)")
    p.add_argument("--time-limit", type=float, default=60.0, help="cap on every test's time limit, seconds")
    p.add_argument("--hidden-tests", type=Path, action="append", default=[], help="passed on to tools/grade.py")
    p.add_argument("--sanitize", action="store_true",
                   help="grade under AddressSanitizer and UBSan (tools/grade.py --sanitize): a read or write outside "
                        "an array kills the mutant even where no test looks")
    p.add_argument("--build-dir", type=Path, help="default: build/mutate-NN (build/mutate-NN-sanitize with --sanitize)")
    p.add_argument("--report", type=Path, help="also write the table (Markdown) to this file")
    p.add_argument("--whole", action="store_true",
                   help="grade every test of every mutant in one run (its score; slower) instead of stopping at the "
                        "first test lost")
    p.add_argument("--jobs", "-j", type=int, default=2, help="parallel build jobs")
    p.add_argument("--source-dir", type=Path, default=root, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = args.source_dir.resolve()
    lab = args.lab.zfill(2)
    if lab not in labgen.LAB_DIRS:
        print(f"mutate_lab: unknown lab {args.lab}; labs are {', '.join(labgen.LAB_DIRS)}", file=sys.stderr)
        return 2
    kinds = tuple(k for k in args.kinds.split(",") if k)
    if not kinds or any(k not in KINDS for k in kinds):
        print(f"mutate_lab: --kinds {args.kinds}: the kinds are {', '.join(KINDS)}", file=sys.stderr)
        return 2
    wanted = {f for f in args.functions.split(",") if f}
    regions = [r for r in labgen.all_regions(root / "reference") if r.lab == lab]
    unknown = sorted(wanted - {r.function for r in regions})
    if unknown:
        print(f"mutate_lab: --functions {', '.join(unknown)}: not a function of lab {lab}; its functions are "
              f"{', '.join(sorted({r.function for r in regions}))}", file=sys.stderr)
        return 2
    mutants = lab_mutants(root, [r for r in regions if not wanted or r.function in wanted], kinds)
    try:
        numbers = {int(n) for n in args.numbers.split(",") if n.strip()}
    except ValueError:
        print(f"mutate_lab: --numbers {args.numbers}: expected comma-separated numbers, e.g. 1,7,11", file=sys.stderr)
        return 2
    missing = sorted(numbers - {m.number for m in mutants})
    if missing:
        print(f"mutate_lab: --numbers {', '.join(map(str, missing))}: no such mutant; with these --kinds and "
              f"--functions they are numbered 1 to {len(mutants)} (see --list)", file=sys.stderr)
        return 2
    if numbers:
        mutants = [m for m in mutants if m.number in numbers]
    if args.list:
        for m in mutants:
            print(f"{m.number:4d} {m.kind:8s} {m.function:28s} reference/{m.rel}:{m.line}  {m.describe()}")
        print(f"{len(mutants)} mutants", file=sys.stderr)
        return 0
    args.build_dir = (args.build_dir or root / "build" / f"mutate-{lab}{'-sanitize' if args.sanitize else ''}").resolve()
    files = sorted({r.rel for r in regions})
    verdicts: list[Verdict] = []
    with tempfile.TemporaryDirectory(prefix=f"mutate-{lab}-") as tmp:
        work = Path(tmp)
        capped_grading_dir(root, work / "grading", args.time_limit)
        try:
            tests = [t for t in grade.load_tests([work / "grading"], args.hidden_tests) if t.lab == lab]
        except grade.GradingError as e:
            print(f"mutate_lab: {e}", file=sys.stderr)
            return 2
        for m in mutants:
            v = grade_mutant(root, lab, m, files, work, args, work / "grading", tests)
            verdicts.append(v)
            print(f"[{m.number}/{len(mutants)}] {m.function} reference/{m.rel}:{m.line} {m.describe()}: {v.status}"
                  f"{' ' + v.score if v.score else ''}{' by ' + ', '.join(v.lost) if v.lost else ''} "
                  f"({v.ran} tests, {v.seconds:.0f} s)", file=sys.stderr, flush=True)
    text = report(lab, verdicts, args.whole)
    print(text, end="")
    if args.report:
        args.report.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
