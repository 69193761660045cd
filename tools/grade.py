#!/usr/bin/env python3
"""Grades one lab: builds with the student's files, runs every graded test of the lab in its own
process, prints a table of points with a hint for every failure, and writes Gradescope's
results.json.

    python3 tools/grade.py 00                       your labs/00-naive files
    python3 tools/grade.py 00 --reference           the reference solution (instructors: full marks)
    python3 tools/grade.py 00 --student-dir SUB     a submission (files found by path or by name)
    python3 tools/grade.py 00 --results results.json --hidden-tests /path/to/hidden
    python3 tools/grade.py 00 --sanitize            under AddressSanitizer + UBSan (catches what
                                                    the numbers cannot: a write past an array)

The graded tests, their points and time limits come from tests/grading/*.json (and *.json in each
--hidden-tests directory); format in tests/grading/README.md. Each test runs as
`<binary> -w NoTests <spec>` (under mpiexec when it has "ranks") with its time limit. The student's
code runs inside that process, so neither its output nor its exit status can be the verdict: each
run gets a fresh secret, and a test passes only when it exits 0 and every rank's test main wrote a
results file signed with that secret after Catch2's session returned, in which every test case
that ran passed with at least one assertion (read_results; tests/support/graded_results.hpp).
results.json is written only after every test has finished.

Standard library only, so any python3 runs it.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import hashlib
import hmac
import json
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import labgen  # noqa: E402  (the lab table and the index of lab regions)

SKIP_RETURN_CODE = 77                  # a GPU test exits with it where there is no GPU (as in CTest)
OUTPUT_KEEP_BYTES = 64 * 1024          # output kept per test: the first and the last 32 KB
OUTPUT_FLOOD_BYTES = 32 * 1024 * 1024  # a test printing more than this is killed
KILL_GRACE_S = 2.0                     # between SIGTERM and SIGKILL of a test's process group
NONCE_ENV = "SCALELAB_GRADE_NONCE"      # the run's secret: the test main takes it out of its environment
RESULTS_ENV = "SCALELAB_GRADE_RESULTS"  # where each rank writes <path>.<rank>
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}
SANITIZE_PRESET = "debug-asan"   # --sanitize builds with this configure preset's cache variables
SANITIZE_TIME_SCALE = 2          # --sanitize multiplies every time limit by this (see sanitize_tests)


class GradingError(Exception):
    """A problem with the grading setup itself (not with the student's code)."""


# ----------------------------------------------------------------------------------------------
# The graded tests

@dataclasses.dataclass
class GradedTest:
    name: str
    lab: str
    points: float
    timeout: float
    binary: str
    spec: str
    ranks: int = 0
    labels: list[str] = dataclasses.field(default_factory=list)
    functions: list[str] = dataclasses.field(default_factory=list)  # where to look first
    uses: list[str] = dataclasses.field(default_factory=list)  # other student functions it exercises
    hint: str = ""
    visibility: str = "visible"
    source: str = ""  # the JSON file it came from

    @property
    def gpu(self) -> bool:
        return "gpu" in self.labels

    @property
    def covers(self) -> set[str]:
        """Every student function whose mistake can fail this test."""
        return set(self.functions) | set(self.uses)


VISIBILITIES = {"visible", "hidden", "after_due_date", "after_published"}


def parse_test(e: object, where: str, default_visibility: str, source: str) -> GradedTest:
    """One entry of a test list, every field checked for its type and range: a list written by
    hand (or damaged) gets one GradingError naming the file, the entry and the field."""
    if not isinstance(e, dict):
        raise GradingError(f"{where}: each test must be a JSON object (see tests/grading/README.md)")
    missing = [k for k in ("name", "lab", "points", "timeout", "binary", "spec") if k not in e]
    if missing:
        raise GradingError(f"{where}: missing {', '.join(missing)} (see tests/grading/README.md)")

    def bad(key: str, wanted: str) -> GradingError:
        return GradingError(f"{where}: {key} must be {wanted}, got {json.dumps(e[key])[:60]}")

    def text(key: str, allow_empty: bool = False) -> str:
        value = e.get(key, "")
        if not isinstance(value, str) or not (value or allow_empty):
            raise bad(key, "a string" if allow_empty else "a non-empty string")
        return value

    def number(key: str) -> float:
        value = e[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise GradingError(f"{where}: points and timeout must be numbers, got {key} = {json.dumps(value)[:60]}")
        return float(value)

    def strings(key: str) -> list[str]:
        value = e.get(key, [])
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise bad(key, "a list of strings")
        return list(value)

    lab = e["lab"]
    if isinstance(lab, bool) or not isinstance(lab, (str, int)) or not re.fullmatch(r"\d{1,2}", str(lab)):
        raise bad("lab", 'a lab number such as "05"')
    points, timeout = number("points"), number("timeout")
    if points < 0 or timeout <= 0:
        raise GradingError(f"{where}: points must be >= 0 and timeout > 0")
    ranks = e.get("ranks", 0)
    if ranks is None:
        ranks = 0
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 0:
        raise bad("ranks", "a whole number of MPI ranks (0 or absent: no mpiexec)")
    visibility = e.get("visibility", default_visibility)
    if not isinstance(visibility, str) or visibility not in VISIBILITIES:
        raise GradingError(f"{where}: visibility must be one of {sorted(VISIBILITIES)}")
    return GradedTest(name=text("name"), lab=str(lab).zfill(2), points=points, timeout=timeout,
                      binary=text("binary"), spec=text("spec"), ranks=ranks, labels=strings("labels"),
                      functions=strings("functions"), uses=strings("uses"), hint=text("hint", allow_empty=True),
                      visibility=visibility, source=source)


def load_tests(dirs: list[Path], hidden_dirs: list[Path] = ()) -> list[GradedTest]:
    """Every graded test in *.json of dirs (visible) and hidden_dirs (default after_published)."""
    tests: list[GradedTest] = []
    seen: dict[str, str] = {}
    for directory, default_visibility in [(d, "visible") for d in dirs] + [(d, "after_published") for d in hidden_dirs]:
        for path in sorted(Path(directory).glob("*.json")):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise GradingError(f"{path}: not valid JSON: {e}") from e
            entries = data.get("tests") if isinstance(data, dict) else None
            if not isinstance(entries, list):
                raise GradingError(f"{path}: expected an object with a \"tests\" list (see tests/grading/README.md)")
            for i, e in enumerate(entries):
                where = f"{path}: tests[{i}]"
                tests.append(parse_test(e, where, default_visibility, str(path)))
                if tests[-1].name in seen:
                    raise GradingError(f"{where}: test name {tests[-1].name!r} is also used in {seen[tests[-1].name]}")
                seen[tests[-1].name] = str(path)
    return tests


# ----------------------------------------------------------------------------------------------
# Running one process: its own process group, a time limit, capped output

@dataclasses.dataclass
class RunResult:
    returncode: int | None
    output: str
    seconds: float
    timed_out: bool = False
    flooded: bool = False
    total_bytes: int = 0


def run_capped(cmd: list[str], timeout: float, cwd: Path | None = None, env: dict | None = None,
               keep_bytes: int = OUTPUT_KEEP_BYTES, flood_bytes: int = OUTPUT_FLOOD_BYTES) -> RunResult:
    """Runs cmd in a new session (process group) with stdout+stderr captured: keeps the first and
    the last keep_bytes/2, kills the whole group on timeout or after flood_bytes of output."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            cwd=cwd, env=env, start_new_session=True)
    head = bytearray()
    tail: collections.deque[bytes] = collections.deque()
    state = {"tail_bytes": 0, "total": 0, "flooded": False}
    half = keep_bytes // 2

    def kill_group(sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def reader() -> None:
        assert proc.stdout is not None
        while True:
            chunk = proc.stdout.read1(65536) if hasattr(proc.stdout, "read1") else proc.stdout.read(65536)
            if not chunk:
                return
            state["total"] += len(chunk)
            if len(head) < half:
                take = half - len(head)
                head.extend(chunk[:take])
                chunk = chunk[take:]
            if chunk:
                tail.append(chunk)
                state["tail_bytes"] += len(chunk)
                while state["tail_bytes"] - len(tail[0]) >= half:
                    state["tail_bytes"] -= len(tail.popleft())
            if state["total"] > flood_bytes and not state["flooded"]:
                state["flooded"] = True
                kill_group(signal.SIGKILL)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(signal.SIGTERM)
        try:
            proc.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        kill_group(signal.SIGKILL)
        proc.wait()
    kill_group(signal.SIGKILL)  # whatever the test left running in its group
    thread.join(timeout=5)
    seconds = time.monotonic() - start
    tail_bytes = b"".join(tail)
    if len(tail_bytes) > half:
        tail_bytes = tail_bytes[-half:]
    dropped = state["total"] - len(head) - len(tail_bytes)
    text = head.decode("utf-8", errors="replace")
    if dropped > 0:
        text += f"\n[... {dropped} bytes of output left out ...]\n"
    text += tail_bytes.decode("utf-8", errors="replace")
    return RunResult(returncode=proc.returncode, output=text, seconds=seconds, timed_out=timed_out,
                     flooded=state["flooded"], total_bytes=state["total"])


# ----------------------------------------------------------------------------------------------
# The signed verdict: what a run's test main wrote after Catch2's session returned

@dataclasses.dataclass
class Verdict:
    ok: bool              # every rank's file is there, signed, and every test case passed with assertions
    problem: str = ""     # why not, for the student


def read_results(prefix: Path, nonce: str, ranks: int) -> Verdict:
    """Checks <prefix>.<rank> for every rank (tests/support/graded_results.hpp writes them):

        scalelab-graded-results 1
        rank R
        session S                       Catch2's return value (failed test cases)
        case passed|failed P F NAME     per test case: assertions passed and failed
        token HEX                       HMAC-SHA256(nonce, every line above)

    A file without the right token was not written by the test main of this run (the nonce is
    fresh and only that main knew it); a test case with no assertion proves nothing."""
    for rank in range(max(ranks, 1)):
        who = f"rank {rank}" if ranks else "the test process"
        try:
            text = Path(f"{prefix}.{rank}").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return Verdict(False, f"{who} wrote no verdict: the test runner did not finish normally")
        body, _, token_line = text.rstrip("\n").rpartition("\n")
        token = token_line[len("token "):] if token_line.startswith("token ") else ""
        expected = hmac.new(nonce.encode(), (body + "\n").encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(token, expected):
            return Verdict(False, f"{who}'s verdict is not signed by this run's test runner")
        lines = body.split("\n")
        if lines[:2] != ["scalelab-graded-results 1", f"rank {rank}"] or not lines[2].startswith("session "):
            return Verdict(False, f"{who}'s verdict is malformed")
        if lines[2] != "session 0":
            return Verdict(False, f"Catch2 reported failed test cases in {who}")
        for line in lines[3:]:
            fields = line.split(" ", 4)
            if len(fields) != 5 or fields[0] != "case":
                return Verdict(False, f"{who}'s verdict is malformed")
            _, status, passed, failed, name = fields
            if status != "passed" or failed != "0":
                return Verdict(False, f"test case \"{name}\" failed in {who}")
            if passed == "0":
                return Verdict(False, f"test case \"{name}\" ended without checking anything (no assertion) in {who}")
        if len(lines) == 3:
            return Verdict(False, f"{who} ran no test case")
    return Verdict(True)


# ----------------------------------------------------------------------------------------------
# Reading Catch2's console output

FAILED_AT_RE = re.compile(r"^(.+?):(\d+): FAILED:\s*$")
STUB_RE = re.compile(r"Lab (\d\d): implement ([A-Za-z_][\w:~]*) \(see ([^)]*)\)")
MPI_SIGNAL_RE = re.compile(r"exited on signal (\d+) \(([^)]*)\)")
CATCH_SIGNAL_RE = re.compile(r"due to a fatal error condition:\s*\n\s*(SIG[A-Z]+)")
# AddressSanitizer's "==123==ERROR: AddressSanitizer: heap-buffer-overflow on address ..." and
# UndefinedBehaviorSanitizer's "path/file.cpp:12:5: runtime error: ...".
ASAN_RE = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer): ([\w-]+(?: memory leaks)?)")
UBSAN_RE = re.compile(r"^(\S+?):(\d+):\d+: runtime error: (.*)$", re.M)
# A stack frame of a sanitizer report: "    #3 0x55d0c0 in scalelab::layernorm_backward(...) /src/labs/x.cpp:42:7".
FRAME_RE = re.compile(r"^\s*#\d+ 0x[0-9a-f]+ in (.+?) (/\S+?:\d+)(?::\d+)?\s*$", re.M)
# reference/comm/watchdog.cpp: "rank 3 (rank 1 of 2 in its communicator): recv from rank 0 did not
# complete within 20 s (comm timeout). ..."
WATCHDOG_RE = re.compile(r"rank (\d+) \(rank \d+ of \d+ in its communicator\): (.+?) did not complete within "
                         r"([\d.e+-]+) s")


@dataclasses.dataclass
class Failure:
    where: str            # file:line of the assertion
    test_case: str
    lines: list[str]      # the expression and its expansion, as Catch2 printed them
    messages: list[str]   # the INFO/exception messages, with Catch2's line wrapping undone

    def render(self, max_lines: int = 20) -> list[str]:
        out = ["  " + ln for ln in self.lines[:max_lines]]
        out += ["  | " + m for m in self.messages]
        return out


SEPARATOR_RE = re.compile(r"^-{20,}$")
MESSAGE_HEAD_RE = re.compile(r"^(with messages?:|due to unexpected exception with messages?:|"
                             r"due to a fatal error condition:)\s*$")


CATCH_BREAK_BEFORE = "[({<|"          # Catch2's TextFlow may break a line before these characters
CATCH_BREAK_AFTER = "])}>.,:;*+-=&/\\"  # ... or after these, besides at whitespace


def _first_piece(text: str) -> str:
    """The text up to the first place where Catch2 could have broken a line."""
    for i in range(1, len(text)):
        if text[i].isspace() or text[i] in CATCH_BREAK_BEFORE or text[i - 1] in CATCH_BREAK_AFTER:
            return text[:i]
    return text


def _glue(prev: str, nxt: str) -> str:
    """What Catch2 dropped at a line break: a space, or nothing (inside '0.25', 'a/b', '1e-5')."""
    last, first = prev[-1:], nxt[:1]
    if last == "." and (first.isdigit() or first.islower()):
        return ""
    if last in "-/\\" or (last in CATCH_BREAK_AFTER and last not in ".,:;])}>*+=&"):
        return ""
    return " "


def unwrap(lines: list[str], width: int) -> list[str]:
    """Catch2 wraps every message greedily at the console width with the message's own
    indentation, so a line was wrapped exactly when the next line's first word would not have
    fitted after it; otherwise the next line starts a new message. Rejoins the wrapped lines."""
    messages: list[str] = []
    prev_len = 0
    for ln in lines:
        text = ln.strip()
        if messages and prev_len + len(_first_piece(text)) >= width:
            messages[-1] += _glue(messages[-1], text) + text
        else:
            messages.append(text)
        prev_len = len(ln.rstrip())
    return messages


# Catch2's start-up banner. Under mpiexec every rank prints one, and it can land inside another
# rank's test case header: dropped first, so that it never becomes part of a test case's name.
BANNER_RE = re.compile(r"^(~{20,}|.* is a Catch v[\d.]+ host application\.|Run with -\? for options)\s*$")


def parse_failures(output: str) -> list[Failure]:
    failures: list[Failure] = []
    lines = [ln for ln in output.splitlines() if not BANNER_RE.match(ln)]
    width = next((len(ln) for ln in lines if SEPARATOR_RE.match(ln)), 79)  # Catch2's console width - 1
    test_case = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if SEPARATOR_RE.match(line):  # a test case header: dashes, the name (and sections), dashes
            j = i + 1
            names = []
            while j < len(lines) and not SEPARATOR_RE.match(lines[j]) and j - i < 6:
                names.append(lines[j].strip())
                j += 1
            # Blank between two dashed lines is not a header: mpiexec boxes its messages in dashes.
            if j < len(lines) and SEPARATOR_RE.match(lines[j]) and any(names):
                test_case = " / ".join(n for n in names if n)
                i = j + 1
                continue
        m = FAILED_AT_RE.match(line)
        if m:
            body: list[str] = []
            message_lines: list[str] = []
            j = i + 1
            in_messages = False
            while j < len(lines) and lines[j].strip() and not FAILED_AT_RE.match(lines[j]) \
                    and not re.match(r"^[-=.]{20,}$", lines[j]):
                ln = lines[j].rstrip()
                if MESSAGE_HEAD_RE.match(ln):
                    in_messages = True
                elif in_messages and ln.startswith(" "):
                    message_lines.append(ln)
                else:
                    in_messages = False
                    body.append(ln)
                j += 1
            where = f"{shorten_path(m.group(1))}:{m.group(2)}"
            failures.append(Failure(where=where, test_case=test_case, lines=body,
                                    messages=unwrap(message_lines, width)))
            i = j
            continue
        i += 1
    return failures


def shorten_path(path: str) -> str:
    root = str(labgen.repo_root()) + os.sep
    return path[len(root):] if path.startswith(root) else path


# ----------------------------------------------------------------------------------------------
# Outcome of one test

@dataclasses.dataclass
class Outcome:
    test: GradedTest
    status: str            # passed, failed, crashed (SIGSEGV), hang, output flood, skipped (no GPU), not built
    score: float
    seconds: float = 0.0
    hint: str = ""         # one line for the table
    details: str = ""      # the full hint
    output: str = ""       # the test's output (capped)
    stub_messages: list[str] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status == "passed"


class WhereToLook:
    """function name -> where its student code is, from the lab regions of the reference."""

    def __init__(self, root: Path):
        self.regions: dict[str, list[labgen.Region]] = {}
        try:
            for r in labgen.all_regions(root / "reference"):
                self.regions.setdefault(r.function, []).append(r)
        except (labgen.MarkerError, OSError):
            pass  # the hint then names the function without its file

    def describe(self, function: str) -> str:
        regions = self.regions.get(function)
        if not regions:
            return function
        r = regions[0]
        return f"{function} in {r.student_file()} ({r.handout()}, section {r.section})"


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def watchdog_hang(output: str) -> str:
    """The communication watchdog's line (reference/comm/watchdog.cpp) without its boilerplate:
    "rank 1: recv from rank 0 did not complete within 20 s", or "" when there is none."""
    m = WATCHDOG_RE.search(output)
    return f"rank {m.group(1)}: {m.group(2)} did not complete within {m.group(3)} s" if m else ""


def sanitizer_report(output: str, renames: dict[str, str] | None = None) -> tuple[str, str]:
    """(what, where) of the first sanitizer error in the output, or ("", ""): what the sanitizer
    found, and the first stack frame in the student's files (labs/), else the first frame.
    renames: as for compiler_errors, so that a staged submission's frames read as its lab folder."""
    def shown(path: str) -> str:
        for long, short in (renames or {}).items():
            if path.startswith(long):
                return short + path[len(long):]
        return shorten_path(path)

    m = ASAN_RE.search(output)
    if m:
        frames = [(function, shown(path)) for function, path in FRAME_RE.findall(output[m.end():])]
        mine = [f for f in frames if f[1].startswith("labs/")] or frames
        if not mine:
            return f"{m.group(1)}: {m.group(2)}", ""
        function, path = mine[0]
        return f"{m.group(1)}: {m.group(2)}", f"{function.split('(')[0]} ({path})"
    m = UBSAN_RE.search(output)
    if m:
        return f"UndefinedBehaviorSanitizer: {m.group(3)}", f"{shown(m.group(1))}:{m.group(2)}"
    return "", ""


def sanitizer_advice(what: str) -> str:
    """What a sanitizer report of this kind usually means in a lab's code."""
    if what.startswith("LeakSanitizer"):
        return ("Memory was allocated (new, malloc) and never freed; the frame named is where it was allocated. "
                "Hold it in a std::vector or a Buffer, which free themselves.")
    if "use-after" in what:
        return ("That line uses memory after its owner freed it: a pointer or reference kept into a vector that "
                "was resized or destroyed, or into a local that has gone out of scope.")
    if what.endswith((": attempting", ": alloc-dealloc-mismatch")):  # "attempting double-free", "... free on"
        return ("Memory was freed twice, or freed with the wrong call (delete for new[], free for new). Let a "
                "std::vector or a Buffer own it instead.")
    if what.startswith("UndefinedBehaviorSanitizer"):
        return ("That line does something the language leaves undefined (a signed integer overflow, a shift by "
                "too much, an index past a fixed-size array, a misaligned or null pointer).")
    return ("That line (or the index computed just before it) reads or writes outside an array, often one "
            "element past its end (a loop to i <= n); check its indices against the shape comments. It can "
            "pass without the sanitizer when the extra write lands in memory the test never checks.")


def judge(test: GradedTest, run: RunResult, where: WhereToLook, verdict: Verdict | None = None,
          renames: dict[str, str] | None = None) -> Outcome:
    out = run.output
    # Catch2 wraps long messages at 80 columns: join the pieces of each stub message again.
    stubs = sorted(set(" ".join(m.group(0).split()) for m in STUB_RE.finditer(out)))
    failures = parse_failures(out)
    verdict = verdict or Verdict(False, "no verdict was read")
    hang = watchdog_hang(out)
    sanitizer, sanitizer_at = sanitizer_report(out, renames)
    status, short, why = "failed", "", ""
    if run.timed_out or (hang and run.returncode != 0):
        # A hang, whether the communication watchdog ended the job or our time limit did.
        status = "hang"
        short = hang or f"no result within {test.timeout:g} s; stopped"
        why = ((f"The communication watchdog ended the job: {hang}. " if hang else
                f"No result within the time limit of {test.timeout:g} s, so the test was stopped. ") +
               "Look for an infinite loop or a deadlock (with ranks: one rank waiting for a message that is never "
               "sent, or ranks calling different collectives), or code that is far too slow.")
    elif run.flooded:
        status = "output flood"
        why = (f"The test printed more than {OUTPUT_FLOOD_BYTES // (1024 * 1024)} MB and was stopped. "
               f"Remove debug printing from loops.")
        short = "printed too much output; stopped"
    elif run.returncode == SKIP_RETURN_CODE:
        status = "skipped (no GPU)" if test.gpu else "skipped"
        why = ("The test reported that it cannot run here (exit code 77: no GPU on this machine). It earns no "
               "points here; it is graded where a GPU is present.")
        short = "needs a GPU; not run here"
    elif sanitizer:
        # Before the signals: the report says more than the signal it ends with (a SEGV under ASan,
        # or the other ranks' SIGTERM from mpiexec after one rank's report).
        status = "crashed (sanitizer)"
    elif run.returncode is not None and run.returncode < 0:
        status = f"crashed ({signal_name(-run.returncode)})"
    elif MPI_SIGNAL_RE.search(out):
        m = MPI_SIGNAL_RE.search(out)
        status = f"crashed ({signal_name(int(m.group(1)))})"
    elif CATCH_SIGNAL_RE.search(out):
        status = f"crashed ({CATCH_SIGNAL_RE.search(out).group(1)})"
    elif run.returncode == 0 and verdict.ok:
        status = "passed"
    elif "No test cases matched" in out:
        why = (f"The binary {test.binary} has no test case matching {test.spec!r}: the graded-test list "
               f"({Path(test.source).name}) and the test sources disagree. This is a problem of the lab, "
               f"not of your code: tell the course staff.")
        short = "no test case matched (course setup problem)"
    elif run.returncode == 0:
        # Exit status 0 but no valid verdict: the code under test ended the process early (exit,
        # _Exit, a forked child), printed a summary of its own, or a test case checked nothing.
        why = (f"The test exited with status 0, but {verdict.problem}, so it does not count as passed. Code under "
               f"test must return normally: do not call exit(), _Exit() or fork(), and do not print Catch2's "
               f"messages yourself.")
        short = f"no valid verdict: {verdict.problem}"

    if status == "crashed (sanitizer)":
        short = sanitizer + (f" in {sanitizer_at}" if sanitizer_at else "")
        why = (f"The sanitizer build stopped the test: {sanitizer}" + (f", in {sanitizer_at}" if sanitizer_at else "")
               + ". " + sanitizer_advice(sanitizer) + " The whole report is in this test's output in results.json.")
    elif status.startswith("crashed"):
        why = (f"The test process died with {status[9:-1]}. Typical causes: reading or writing outside an "
               f"array (check every index against the shape comments), a null pointer, or an exception thrown "
               f"where none may escape (std::terminate -> SIGABRT).")
        short = f"crashed with {status[9:-1]}"

    if status == "failed" and not why and not failures and not stubs:
        tail = "\n".join("  | " + line for line in out.strip().splitlines()[-12:])
        why = (f"The test exited with status {run.returncode} without a Catch2 failure report. The last lines "
               f"it printed (all of them are in results.json):\n{tail}")
    score = test.points if status == "passed" else 0.0
    parts: list[str] = []
    if status != "passed":
        if why:
            parts.append(why)
        if test.hint:
            parts.append(f"What this test checks: {test.hint}")
        if stubs:
            parts.append("Not implemented yet (the skeleton's stub threw): " + "; ".join(stubs))
            if not short:
                short = stubs[0]
        if test.functions:
            parts.append("Where to look:" + "".join("\n  - " + where.describe(f) for f in test.functions))
        if status == "hang":
            # What Catch2 printed when the job was ended (SIGTERM in every rank) is no failure of
            # the student's: say only where it hung, if a rank said so.
            named = next((f for f in failures if f.test_case), None)
            if named:
                parts.append(f"It hung in test case \"{named.test_case}\" ({named.where}).")
        elif failures:
            f = failures[0]
            text = [f"First failure: {f.where}" + (f" in test case \"{f.test_case}\"" if f.test_case else "")]
            text += f.render()
            if len(failures) > 1:
                text.append(f"  (and {len(failures) - 1} more failed assertion(s); "
                            f"the whole output is in results.json)")
            parts.append("\n".join(text))
            if not short:
                short = first_message(f) or f"failed at {f.where}"
        if not short:
            if run.returncode not in (None, 0):
                short = f"exit status {run.returncode}"
            else:
                short = "failed"
    return Outcome(test=test, status=status, score=score, seconds=run.seconds, hint=short,
                   details="\n".join(parts), output=out, stub_messages=stubs)


def point_to_narrower_failures(outcomes: list[Outcome]) -> None:
    """A whole-model test fails whenever any layer it uses is wrong, so its own hint cannot say
    which. When a narrower test (one that checks some of the functions this one uses, and fewer)
    failed too, the student should start there: say so first, in the hint and the table."""
    failed = [o for o in outcomes if o.status == "failed"]
    for o in failed:
        # A stub that threw in this test names the function to write first (a test may construct
        # something it does not list, as DDP plans its buckets in naive mode too): point at the
        # narrowest failing test of that function.
        stubbed = {m.group(2) for m in map(STUB_RE.search, o.stub_messages) if m}
        narrower = [u for u in failed if u is not o and stubbed & set(u.test.functions)]
        if not narrower:
            narrower = [u for u in failed if u is not o and u.test.functions
                        and set(u.test.functions) <= o.test.covers and len(u.test.covers) < len(o.test.covers)]
        if not narrower:
            continue
        fewest = min(len(u.test.covers) for u in narrower)  # the narrowest of them: the likeliest place
        narrower = [u for u in narrower if len(u.test.covers) == fewest]
        names = ", ".join(f"{u.test.name} ({', '.join(u.test.functions)})" for u in narrower)
        o.details = (f"Start with {names}: also failing, and it tests less, so the mistake is easier to find "
                     f"there; this test uses that code too.\n" + o.details)
        o.hint = f"start with {narrower[0].test.name}; {o.hint}"


def unexpected_losses(outcomes: list[Outcome], function: str, keep: list[str] = ()) -> list[str]:
    """For --expect-lose: the tests that cover `function` must fail and every other test pass.
    keep (--expect-keep): names or name prefixes of tests that cover `function` but that this
    particular mistake cannot reach (a memory test, for a wrong sum): they must pass. At least one
    test must fail, or the mistake proved nothing."""
    problems = []
    kept = lambda o: any(o.test.name.startswith(k) for k in keep)  # noqa: E731
    for k in keep:
        matched = [o for o in outcomes if o.test.name.startswith(k)]
        if not matched:
            problems.append(f"--expect-keep {k} matches no graded test")
        problems += [f"--expect-keep {k}: {o.test.name} does not cover {function} (it must pass anyway)"
                     for o in matched if function not in o.test.covers]
    for o in outcomes:
        covers = function in o.test.covers
        if o.status.startswith("skipped"):
            continue
        if covers and kept(o):
            if not o.passed:
                problems.append(f"{o.test.name} {o.status} although this mistake is expected to keep it "
                                "(--expect-keep)")
        elif covers and o.passed:
            problems.append(f"{o.test.name} passed although it covers {function}")
        elif not covers and not o.passed:
            problems.append(f"{o.test.name} {o.status} although it does not cover {function}")
    if not problems and not any(not o.passed and not o.status.startswith("skipped") for o in outcomes):
        problems.append("no test failed")
    return problems


def first_message(f: Failure) -> str:
    """The most telling line of a failure for the table: a comparison's MISMATCH message, else a
    message with the values, else the last message, else the failed expression."""
    for wanted in ("MISMATCH", "got", "expected"):
        chosen = [m for m in f.messages if wanted in m]
        if chosen:
            return chosen[0]
    if f.messages:
        return f.messages[-1]
    return f.lines[0].strip() if f.lines else ""


# ----------------------------------------------------------------------------------------------
# Building

def cmake_cache_value(build_dir: Path, key: str) -> str | None:
    cache = build_dir / "CMakeCache.txt"
    if not cache.exists():
        return None
    for line in cache.read_text(encoding="utf-8", errors="replace").splitlines():
        m = re.match(rf"^{re.escape(key)}:[A-Z]+=(.*)$", line)
        if m:
            return m.group(1)
    return None


def request_codemodel(build_dir: Path) -> None:
    query = build_dir / ".cmake" / "api" / "v1" / "query"
    query.mkdir(parents=True, exist_ok=True)
    (query / "codemodel-v2").touch()


def executable_targets(build_dir: Path) -> dict[str, Path]:
    """Executable target name -> its file, from the CMake file API reply of the last configure."""
    reply = build_dir / ".cmake" / "api" / "v1" / "reply"
    indexes = sorted(reply.glob("index-*.json"))
    if not indexes:
        return {}
    index = json.loads(indexes[-1].read_text())
    entry = index.get("reply", {}).get("codemodel-v2")
    if not entry:
        return {}
    codemodel = json.loads((reply / entry["jsonFile"]).read_text())
    result = {}
    for config in codemodel.get("configurations", [])[:1]:
        for t in config.get("targets", []):
            target = json.loads((reply / t["jsonFile"]).read_text())
            if target.get("type") == "EXECUTABLE" and target.get("artifacts"):
                p = Path(target["artifacts"][0]["path"])
                result[t["name"]] = p if p.is_absolute() else build_dir / p
    return result


ERROR_LINE_RE = re.compile(r"(error:|fatal error|undefined reference|CMake Error|No rule to make target|"
                           r"multiple definition|ld returned)", re.I)


def compiler_errors(log: str, source_root: Path, max_chars: int = 16000, renames: dict[str, str] | None = None) -> str:
    """The error lines of a build log with a little context (the notes and carets that follow)."""
    lines = log.splitlines()
    keep: list[int] = []
    for i, ln in enumerate(lines):
        if ERROR_LINE_RE.search(ln):
            keep.extend(range(max(0, i - 1), min(len(lines), i + 6)))
    if not keep:
        chosen = lines[-80:]
    else:
        chosen, last = [], -2
        for i in sorted(set(keep)):
            if i != last + 1 and chosen:
                chosen.append("...")
            chosen.append(lines[i])
            last = i
    text = "\n".join(chosen)
    for long, short in (renames or {}).items():  # the staged submission reads as the student's lab folder
        text = text.replace(long, short)
    text = text.replace(str(source_root) + os.sep, "")
    if len(text) > max_chars:
        text = text[:max_chars] + "\n[... more errors left out ...]"
    return text


@dataclasses.dataclass
class BuildResult:
    ok: bool
    log: str
    binaries: dict[str, Path]
    seconds: float


CONFIGURE_STAMP = ".grade-configure.json"


def configure_stamp(source: Path, configure: list[str], cmake_defs: dict[str, str]) -> dict:
    """What a configure step's result depends on beyond the files CMake itself watches (its list
    files and the CONFIGURE_DEPENDS globs): the command line, the lab folders, the folders of
    tests/, and which files each lab folder it is pointed at holds (a student file is compiled in
    place of the reference's when it exists)."""
    files = {}
    for key, value in sorted(cmake_defs.items()):
        if key.startswith("SCALELAB_LAB_DIR_") and Path(value).is_dir():
            files[key] = sorted(p.relative_to(value).as_posix() for p in Path(value).rglob("*") if p.is_file())
    labs = sorted(p.name for p in (source / "labs").glob("[0-9][0-9]-*"))
    # tests/CMakeLists.txt adds every folder of tests/ it finds, without CONFIGURE_DEPENDS.
    tests = source / "tests"
    test_dirs = sorted(p.name for p in tests.iterdir() if p.is_dir()) if tests.is_dir() else []
    return {"command": configure, "lab_dirs": labs, "test_dirs": test_dirs, "files": files}


def configured_alike(build_dir: Path, stamp: dict) -> bool:
    """True when the last configure of build_dir was grade.py's with the same stamp and nothing has
    rewritten CMakeCache.txt since (another cmake run, e.g. ci_labs.sh's skeleton build, does).
    The files CMake reads (CMakeLists.txt, cmake/*.cmake) need no check: the build re-runs
    CMake by itself when one of them changes."""
    try:
        old = json.loads((build_dir / CONFIGURE_STAMP).read_text(encoding="utf-8"))
        cache_mtime = (build_dir / "CMakeCache.txt").stat().st_mtime_ns
    except (OSError, ValueError):
        return False
    return (old.get("stamp") == stamp and old.get("cache_mtime_ns") == cache_mtime
            and bool(executable_targets(build_dir)))


def build(source: Path, build_dir: Path, cmake_defs: dict[str, str], cmake_args: list[str], targets: list[str],
          jobs: int, timeout: float) -> BuildResult:
    start = time.monotonic()
    build_dir.mkdir(parents=True, exist_ok=True)
    request_codemodel(build_dir)
    configure = ["cmake", "-S", str(source), "-B", str(build_dir)]
    configure += [f"-D{k}={v}" for k, v in cmake_defs.items()] + cmake_args
    stamp = configure_stamp(source, configure, cmake_defs)
    if configured_alike(build_dir, stamp):
        print("grade: not configuring again: same settings and files as this build directory's last configure",
              file=sys.stderr, flush=True)
    else:
        print(f"grade: configuring: {' '.join(configure)}", file=sys.stderr, flush=True)
        run = run_capped(configure, timeout=timeout, keep_bytes=256 * 1024)
        if run.returncode != 0:
            why = "timed out" if run.timed_out else f"exit status {run.returncode}"
            (build_dir / CONFIGURE_STAMP).unlink(missing_ok=True)
            return BuildResult(False, f"CMake configure failed ({why}):\n{run.output}", {}, time.monotonic() - start)
        write_json_atomically(build_dir / CONFIGURE_STAMP,
                              {"stamp": stamp, "cache_mtime_ns": (build_dir / "CMakeCache.txt").stat().st_mtime_ns})
    binaries = executable_targets(build_dir)
    wanted = [t for t in targets if t in binaries]
    if wanted:
        cmd = ["cmake", "--build", str(build_dir), "--target", *wanted, "-j", str(jobs)]
        print(f"grade: building {', '.join(wanted)}", file=sys.stderr, flush=True)
        run = run_capped(cmd, timeout=max(1.0, timeout - (time.monotonic() - start)), keep_bytes=512 * 1024)
        if run.returncode != 0:
            why = "timed out" if run.timed_out else f"exit status {run.returncode}"
            return BuildResult(False, f"The build failed ({why}):\n{run.output}", {}, time.monotonic() - start)
    return BuildResult(True, "", {t: binaries[t] for t in wanted}, time.monotonic() - start)


# ----------------------------------------------------------------------------------------------
# Grading under the sanitizers (--sanitize)
#
# A loop that runs one element too far can write into memory the test does not own (a vector of
# the student's own, the model's next tensor) and still give every right number: only the
# sanitizers see it. --sanitize builds as CI's sanitizer job does and runs every test under
# AddressSanitizer and UndefinedBehaviorSanitizer, so such a test fails with the report's first
# frame in labs/.

def sanitize_cache_variables(source: Path) -> dict[str, str]:
    """The debug-asan configure preset's cache variables (CMakePresets.json): one place says how
    a sanitizer build is made, for CI's sanitizer job and for the grader alike."""
    path = source / "CMakePresets.json"
    try:
        presets = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise GradingError(f"--sanitize reads the {SANITIZE_PRESET} preset from {path}: {e}") from e
    for preset in presets.get("configurePresets", []):
        if preset.get("name") == SANITIZE_PRESET:
            return {k: str(v) for k, v in preset.get("cacheVariables", {}).items()}
    raise GradingError(f"--sanitize: {path} has no configure preset named {SANITIZE_PRESET!r}")


def sanitize_tests(tests: list[GradedTest]) -> list[GradedTest]:
    """The tests with their time limits multiplied by SANITIZE_TIME_SCALE. The sanitizer build
    (-O1, every access checked) ran labs 00 and 08's graded tests 2 to 4 times slower than the
    release build (docs/instructors.md, "Grading under the sanitizers"); the limits already stand
    far above either time, so twice the limit is room enough, and a test that hangs costs no more
    than twice its limit."""
    return [dataclasses.replace(t, timeout=t.timeout * SANITIZE_TIME_SCALE) for t in tests]


def sanitize_env(env: dict, ranks: int) -> dict:
    """The sanitizers' options for one test, as CI's sanitizer job sets them (CMakePresets.json's
    test preset, cmake/ScalelabTesting.cmake): leaks are checked in single-process tests only,
    since OpenMPI's plugins leave allocations LeakSanitizer can neither attribute nor suppress.
    Options already in the environment come last and win."""
    asan = f"detect_leaks={0 if ranks else 1}"
    ubsan = "print_stacktrace=1"
    return dict(env, ASAN_OPTIONS=":".join(filter(None, [asan, env.get("ASAN_OPTIONS", "")])),
                UBSAN_OPTIONS=":".join(filter(None, [ubsan, env.get("UBSAN_OPTIONS", "")])))


# ----------------------------------------------------------------------------------------------
# The student's files

def stage_student_files(lab: str, root: Path, submission: Path, stage: Path) -> list[str]:
    """stage = the lab's skeleton with the submission's files laid over it. A file is taken from
    the submission by its path (labs/NN-name/<rel> or <rel>) or, failing that, by a unique file
    name anywhere in it. Returns notes for the student."""
    lab_dir = root / "labs" / labgen.LAB_DIRS[lab]
    content = {p.relative_to(lab_dir): p.read_bytes() for p in lab_dir.rglob("*") if p.is_file()}
    notes = []
    submitted = [p for p in submission.rglob("*") if p.is_file()]
    by_name: dict[str, list[Path]] = {}
    for p in submitted:
        by_name.setdefault(p.name, []).append(p)
    used: set[Path] = set()
    expected = sorted(p.relative_to(lab_dir).as_posix() for p in lab_dir.rglob("*")
                      if p.is_file() and p.suffix in labgen.SOURCE_SUFFIXES)
    for rel in expected:
        candidates = [submission / "labs" / labgen.LAB_DIRS[lab] / rel, submission / rel]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            same = by_name.get(Path(rel).name, [])
            if len(same) == 1:
                found = same[0]
            elif len(same) > 1:
                notes.append(f"{Path(rel).name}: several files of this name in the submission "
                             f"({', '.join(str(p.relative_to(submission)) for p in same)}); put it at "
                             f"labs/{labgen.LAB_DIRS[lab]}/{rel}. The skeleton's copy was used.")
                continue
        if found is None:
            notes.append(f"{rel}: not in the submission; the skeleton's copy was used (its tests will fail).")
            continue
        content[Path(rel)] = found.read_bytes()
        used.add(found)
        notes.append(f"{rel}: from the submission's {found.relative_to(submission).as_posix()}")
    for p in submitted:
        if p not in used and p.suffix in labgen.SOURCE_SUFFIXES | labgen.HEADER_SUFFIXES:
            notes.append(f"{p.relative_to(submission).as_posix()}: ignored (lab {lab} does not use this file)")
    sync_tree(stage, content)
    return notes


def sync_tree(folder: Path, content: dict[Path, bytes]) -> None:
    """Makes folder hold exactly `content` (relative path -> bytes), rewriting only the files that
    differ: an unchanged file keeps its time stamp, so grading one submission after another in
    the same build directory recompiles only the files that changed."""
    if folder.exists():
        for p in sorted(folder.rglob("*"), reverse=True):  # children before their folders
            if p.is_file() and p.relative_to(folder) not in content:
                p.unlink()
            elif p.is_dir() and not any(p.iterdir()):
                p.rmdir()
    for rel, data in content.items():
        target = folder / rel
        if target.is_file() and target.read_bytes() == data:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


# ----------------------------------------------------------------------------------------------
# Which binaries a wrong solution can change (--skip-unlinked)

def changed_files(lab: str, source: Path, stage: Path) -> list[str]:
    """The staged lab files whose content differs from reference/: where a wrong solution made its
    mistake (relative paths, e.g. dist/ddp.cpp)."""
    changed = []
    for p in sorted(stage.rglob("*")):
        if p.is_file() and p.suffix in labgen.SOURCE_SUFFIXES | labgen.HEADER_SUFFIXES:  # not the handout
            rel = p.relative_to(stage).as_posix()
            ref = source / "reference" / rel
            if not ref.is_file() or ref.read_bytes() != p.read_bytes():
                changed.append(rel)
    return changed


def nm_symbols(path: Path, strong_only: bool) -> set[str] | None:
    """Names of the symbols defined in an object file or executable (nm); strong_only: only the
    strong ones (text, data, bss, read-only: types T D B R), which no other definition can replace.
    None when nm fails."""
    try:
        out = subprocess.run(["nm", "--defined-only", str(path)], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    names = set()
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and (not strong_only or parts[1] in "TDBR"):
            names.add(parts[2])
    return names


def unlinked_binaries(build_dir: Path, lab: str, changed: list[str], binaries: dict[str, Path]) -> dict[str, str]:
    """binary name -> why it cannot see the change: none of the objects compiled from the changed
    files is linked into it. The library is static, so the linker takes an object only when the
    binary needs one of its symbols, and then all of the object's strong symbols are in the
    binary: a binary that has none of them does not contain the object. Anything unproven (an
    object not found, one without strong symbols, nm failing) counts as linked."""
    if not changed:
        return {}
    objects = []
    for rel in changed:
        found = sorted(build_dir.glob(f"**/scalelab.dir/**/student-lab{lab}/{rel}.o"))
        if len(found) != 1:
            return {}
        syms = nm_symbols(found[0], strong_only=True)
        if not syms:
            return {}
        objects.append(syms)
    result = {}
    for name, path in binaries.items():
        syms = nm_symbols(path, strong_only=False)
        if syms is not None and not any(o & syms for o in objects):
            result[name] = f"{name} does not link {', '.join(changed)}"
    return result


# ----------------------------------------------------------------------------------------------
# Reporting

def fmt_points(x: float) -> str:
    return f"{x:g}"


def print_table(title: str, outcomes: list[Outcome], build_failed: str | None, total_possible: float,
                stream=sys.stdout) -> None:
    earned = sum(o.score for o in outcomes)
    print(f"\n{title}", file=stream)
    if build_failed is not None:
        print("\nBUILD FAILED: no test could run; score 0/" + fmt_points(total_possible), file=stream)
        print(build_failed, file=stream)
        return
    name_w = max([len("test")] + [len(o.test.name) for o in outcomes])
    status_w = max([len("status")] + [len(o.status) for o in outcomes])
    header = f"{'test':<{name_w}}  {'points':>9}  {'status':<{status_w}}  hint"
    print(header, file=stream)
    print("-" * max(len(header), 100), file=stream)
    for o in outcomes:
        pts = f"{fmt_points(o.score)}/{fmt_points(o.test.points)}"
        hint = "" if o.passed else o.hint
        if len(hint) > 110:
            hint = hint[:107] + "..."
        print(f"{o.test.name:<{name_w}}  {pts:>9}  {o.status:<{status_w}}  {hint}", file=stream)
    print("-" * max(len(header), 100), file=stream)
    print(f"{'total':<{name_w}}  {fmt_points(earned) + '/' + fmt_points(total_possible):>9}", file=stream)
    failed = [o for o in outcomes if not o.passed]
    if failed:
        print("\nHints for the tests that did not pass:", file=stream)
        for o in failed:
            print(f"\n== {o.test.name} ({o.status}, {fmt_points(o.score)}/{fmt_points(o.test.points)})", file=stream)
            print(o.details, file=stream)


def test_output_for_gradescope(o: Outcome, limit: int = 12000) -> str:
    text = f"{o.status} in {o.seconds:.1f} s (time limit {o.test.timeout:g} s)"
    if o.details:
        text += "\n\n" + o.details
    if not o.passed and o.output.strip():
        out = o.output.strip()
        if len(out) > limit:
            out = out[:limit // 2] + f"\n[... {len(out) - limit} characters left out ...]\n" + out[-limit // 2:]
        text += "\n\n--- test output ---\n" + out
    return text


def results_json(outcomes: list[Outcome], build_failed: str | None, total_possible: float, seconds: float,
                 summary: str) -> dict:
    if build_failed is not None:
        tests = [{"name": "build", "number": "0", "score": 0.0, "max_score": total_possible, "status": "failed",
                  "output": "The code did not build, so no test could run.\n\n" + build_failed,
                  "visibility": "visible"}]
        score = 0.0
    else:
        tests = [{"name": o.test.name, "number": str(i + 1), "score": o.score, "max_score": o.test.points,
                  "status": "passed" if o.passed else "failed", "output": test_output_for_gradescope(o),
                  "visibility": o.test.visibility} for i, o in enumerate(outcomes)]
        score = sum(o.score for o in outcomes)
    return {"score": score, "execution_time": round(seconds, 3), "output": summary, "output_format": "text",
            "test_output_format": "text", "visibility": "visible", "stdout_visibility": "hidden", "tests": tests}


def write_json_atomically(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".results-", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------
# Main

def test_command(test: GradedTest, binary: Path, mpiexec: str | None) -> list[str]:
    cmd = [str(binary), "-w", "NoTests", "--use-colour", "no", test.spec]
    if test.ranks:
        if not mpiexec:
            raise GradingError("mpiexec not found")
        cmd = [mpiexec, "-n", str(test.ranks), "--oversubscribe"] + cmd
    return cmd


def run_graded(cmd: list[str], test: GradedTest, work: Path, env: dict) -> tuple[RunResult, Verdict]:
    """One run with a fresh secret, in a fresh working folder with a fresh results folder in it.
    The verdict is read only after run_capped has killed the run's whole process group, and the
    folders are removed then, so a child that outlives the test has nothing to write into (and no
    secret to sign with). The working folder is the run's own, so that runs side by side
    (--test-jobs) see neither each other's files nor each other's results folders: a submission
    that writes into every results folder it finds can spoil only its own run."""
    nonce = secrets.token_hex(32)
    cwd = Path(tempfile.mkdtemp(prefix="test-", dir=work))
    try:
        prefix = Path(tempfile.mkdtemp(prefix="run-", dir=cwd)) / "verdict"
        run = run_capped(cmd, timeout=test.timeout, cwd=cwd, env=dict(env, **{NONCE_ENV: nonce,
                                                                             RESULTS_ENV: str(prefix)}))
        return run, read_results(prefix, nonce, test.ranks)
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


def not_run_outcome(test: GradedTest, binaries: dict[str, Path], unlinked: dict[str, str],
                    mpiexec: str | None) -> tuple[Outcome | None, list[str]]:
    """The outcome of a test that is not run (its binary is not built, or does not link the
    submission, or mpiexec is missing), else None and the command that runs it."""
    binary = binaries.get(test.binary)
    if binary is None:
        status = "skipped (no GPU)" if test.gpu else "not built"
        detail = (f"The test binary {test.binary} is not part of this build"
                  + (" (no CUDA here); it is graded where a GPU is present." if test.gpu else
                     " (is MPI or CUDA missing, or is the target misnamed in "
                     f"{Path(test.source).name}?). This is a problem of the setup, not of your code."))
        return Outcome(test=test, status=status, score=0.0, hint=detail.split(" (")[0], details=detail), []
    if test.binary in unlinked:
        return Outcome(test=test, status="skipped (unaffected)", score=0.0, hint=unlinked[test.binary],
                       details=unlinked[test.binary] + ": it runs the reference's code."), []
    try:
        return None, test_command(test, binary, mpiexec)
    except GradingError as e:
        return Outcome(test=test, status="not run", score=0.0, hint=str(e), details=str(e)), []


def run_tests(tests: list[GradedTest], binaries: dict[str, Path], unlinked: dict[str, str], mpiexec: str | None,
              work: Path, sanitize: bool, jobs: int, judged) -> list[Outcome]:
    """Runs the tests, up to `jobs` at a time, and returns their outcomes in the order of `tests`.
    Runs side by side cannot read or sign each other's verdicts: each has its own process group,
    secret and results folder (run_graded). Progress lines come as the tests finish."""
    outcomes: list[Outcome | None] = [None] * len(tests)
    lock = threading.Lock()
    # The cores shared out between the runs side by side: more BLAS threads than cores leave
    # OpenMP's idle threads spinning, and two runs of a test of lab 08 took 3.4 times as long.
    threads = str(max(1, (os.cpu_count() or 1) // jobs))
    base_env = dict({"OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads}, **os.environ)

    def report(n: int, o: Outcome, line: str) -> None:
        with lock:
            outcomes[n] = o
            print(f"[{n + 1}/{len(tests)}] {o.test.name}: {line}", file=sys.stderr, flush=True)

    def grade_one(n: int, t: GradedTest, cmd: list[str]) -> None:
        env = dict(base_env, **MPI_ENV) if t.ranks else dict(base_env)
        if sanitize:
            env = sanitize_env(env, t.ranks)
        run, verdict = run_graded(cmd, t, work, env)
        o = judged(t, run, verdict)
        report(n, o, f"{o.status}: {o.hint} ({o.seconds:.1f} s)" if o.status == "hang"
               else f"{o.status} ({o.seconds:.1f} s)")

    to_run = []
    for n, t in enumerate(tests):
        o, cmd = not_run_outcome(t, binaries, unlinked, mpiexec)
        if o is None:
            to_run.append((n, t, cmd))
        else:
            report(n, o, f"skipped (unaffected: {o.hint})" if o.status == "skipped (unaffected)" else o.status)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:  # one worker: in order
        for future in [pool.submit(grade_one, *job) for job in to_run]:
            future.result()
    return [o for o in outcomes if o is not None]


def select_tests(tests: list[GradedTest], only: list[str]) -> tuple[list[GradedTest], list[str]]:
    """--only: a test is chosen by its full name or a prefix of it (lab00.fd_ chooses every
    finite-difference test). Returns the chosen tests and the names that chose nothing."""
    if not only:
        return tests, []
    unmatched = [name for name in only if not any(t.name.startswith(name) for t in tests)]
    return [t for t in tests if any(t.name.startswith(name) for name in only)], unmatched


def list_tests(tests: list[GradedTest], stream=sys.stdout) -> None:
    name_w = max([len("test")] + [len(t.name) for t in tests])
    print(f"{'test':<{name_w}}  {'points':>6}  {'limit':>6}  ranks  functions", file=stream)
    for t in tests:
        print(f"{t.name:<{name_w}}  {fmt_points(t.points):>6}  {fmt_points(t.timeout) + ' s':>6}  "
              f"{t.ranks or '':>5}  {', '.join(t.functions)}", file=stream)
    print(f"{len(tests)} tests, {fmt_points(sum(t.points for t in tests))} points", file=stream)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    root = labgen.repo_root()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("lab", help="the lab number, e.g. 00")
    p.add_argument("--reference", action="store_true", help="grade the reference solution instead of labs/")
    p.add_argument("--student-dir", type=Path, help="a submission: its files replace the lab's skeleton files")
    p.add_argument("--build-dir", type=Path, help="build directory (default: build/grade-NN, one per lab)")
    p.add_argument("--results", type=Path, help="where to write results.json (default: <build-dir>/results.json)")
    p.add_argument("--hidden-tests", type=Path, action="append", default=[],
                   help="a directory of extra tests outside the repository (CMakeLists.txt + *.json); repeatable")
    p.add_argument("--grading-dir", type=Path, action="append", default=None,
                   help="directories of graded-test *.json (default: tests/grading)")
    p.add_argument("--source-dir", type=Path, default=root, help="the scalelab checkout (default: this one)")
    p.add_argument("--cmake-arg", action="append", default=[], help="extra argument for cmake's configure step")
    p.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 2, help="parallel build jobs")
    p.add_argument("--test-jobs", "-J", type=int, default=1,
                   help="tests run side by side (default 1: each test has the machine to itself, as its time "
                        "limit assumes; CI uses 2)")
    p.add_argument("--build-timeout", type=float, default=3600, help="seconds for configure + build")
    p.add_argument("--no-build", action="store_true",
                   help="do not configure or build: run the binaries found in --bin-dir (or the build dir's)")
    p.add_argument("--bin-dir", type=Path, help="with --no-build: where the test binaries are")
    p.add_argument("--mpiexec", help="the MPI launcher (default: the one CMake found, else mpiexec on PATH)")
    p.add_argument("--only", action="append", default=[],
                   help="grade only these tests, by name or a prefix of it (lab00.fd_); repeatable; a name that "
                        "matches no test is an error")
    p.add_argument("--list", action="store_true", help="list the lab's graded tests (after --only) and exit")
    p.add_argument("--expect", choices=["full", "zero"],
                   help="for CI: exit 1 unless every test passed (full; GPU tests may skip), or unless the score "
                        "is 0 with no crash, hang or flood and every failure names the missing 'Lab NN: implement' "
                        "(zero)")
    p.add_argument("--expect-lose", metavar="FUNCTION",
                   help="for CI, with a deliberately wrong solution: exit 1 unless exactly the tests that cover "
                        "FUNCTION (its \"functions\" or \"uses\" in tests/grading) failed")
    p.add_argument("--expect-keep", metavar="TEST", action="append", default=[],
                   help="with --expect-lose: a test (name or prefix) that covers FUNCTION but that this mistake cannot "
                        "reach (a memory test, for a wrong sum): it must pass; repeatable")
    p.add_argument("--skip-unlinked", action="store_true",
                   help="for CI, with --expect-lose or --expect full, and --student-dir: do not run the tests whose "
                        "binary does not link any file in which the submission differs from reference/ (they run the "
                        "reference's code, which CI has graded full marks already); they show as 'skipped "
                        "(unaffected)'")
    p.add_argument("--sanitize", action="store_true",
                   help="build with AddressSanitizer and UndefinedBehaviorSanitizer (the debug-asan preset's settings; "
                        "default build dir build/grade-NN-sanitize) and run every test under them, with its time "
                        f"limit x{SANITIZE_TIME_SCALE}: a read or write outside an array, a use after free, a leak or "
                        "undefined behaviour fails the test even when every number comes out right")
    p.add_argument("--quiet", action="store_true", help="print only the table, not the hints")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    source = args.source_dir.resolve()
    lab = args.lab.zfill(2)
    if lab not in labgen.LAB_DIRS:
        print(f"grade: unknown lab {args.lab}; labs are {', '.join(labgen.LAB_DIRS)}", file=sys.stderr)
        return 2
    if args.reference and args.student_dir:
        print("grade: --reference and --student-dir exclude each other", file=sys.stderr)
        return 2
    if args.skip_unlinked and not ((args.expect_lose or args.expect == "full") and args.student_dir
                                   and not args.no_build):
        print("grade: --skip-unlinked needs --expect-lose or --expect full, and --student-dir (and a build)",
              file=sys.stderr)
        return 2
    if args.test_jobs < 1:
        print(f"grade: --test-jobs {args.test_jobs}: give the number of tests to run side by side, 1 or more",
              file=sys.stderr)
        return 2
    if args.expect_keep and not args.expect_lose:
        print("grade: --expect-keep needs --expect-lose", file=sys.stderr)
        return 2
    # One build directory per lab: switching labs then rebuilds only what changed since that
    # lab's last grading, not every file the other lab swapped.
    build_dir = (args.build_dir or source / "build" / f"grade-{lab}{'-sanitize' if args.sanitize else ''}").resolve()
    results_path = (args.results or build_dir / "results.json").resolve()
    grading_dirs = [d.resolve() for d in (args.grading_dir or [source / "tests" / "grading"])]
    hidden = [d.resolve() for d in args.hidden_tests]
    try:
        lab_tests = [t for t in load_tests(grading_dirs, hidden) if t.lab == lab]
        sanitize_defs = sanitize_cache_variables(source) if args.sanitize and not args.no_build else {}
    except GradingError as e:
        print(f"grade: {e}", file=sys.stderr)
        return 2
    if args.sanitize:
        lab_tests = sanitize_tests(lab_tests)
    tests, unmatched = select_tests(lab_tests, args.only)
    if unmatched:  # before building or writing anything: a typo must not grade (and save) nothing
        print(f"grade: --only {', '.join(unmatched)}: no graded test of lab {lab} has this name or prefix. "
              f"The tests are:", file=sys.stderr)
        list_tests(lab_tests, stream=sys.stderr)
        return 2
    if args.list:
        list_tests(tests)
        return 0
    total_possible = sum(t.points for t in tests)
    what = "the reference solution" if args.reference else (
        f"the submission in {args.student_dir}" if args.student_dir else f"labs/{labgen.LAB_DIRS[lab]}")
    title = (f"Lab {lab} ({labgen.LAB_DIRS[lab]}): {what}, {len(tests)} graded tests"
             + (" under AddressSanitizer and UBSan" if args.sanitize else ""))
    notes: list[str] = []

    build_failed: str | None = None
    binaries: dict[str, Path] = {}
    unlinked: dict[str, str] = {}
    # The staged submission's paths, in compiler errors and sanitizer reports, read as the lab folder.
    renames = {str(build_dir / f"student-lab{lab}") + os.sep: f"labs/{labgen.LAB_DIRS[lab]}/"}
    if args.no_build:
        bin_dir = (args.bin_dir or build_dir / "tests").resolve()
        binaries = {t.binary: bin_dir / t.binary for t in tests if (bin_dir / t.binary).exists()}
    else:
        defs = dict(sanitize_defs, SCALELAB_LABS="none" if args.reference else lab)
        if args.student_dir:
            stage = build_dir / f"student-lab{lab}"
            notes = stage_student_files(lab, source, args.student_dir.resolve(), stage)
            defs[f"SCALELAB_LAB_DIR_{lab}"] = str(stage)
        elif not args.reference and (source / "labs" / labgen.LAB_DIRS[lab]).is_dir():
            defs[f"SCALELAB_LAB_DIR_{lab}"] = str(source / "labs" / labgen.LAB_DIRS[lab])
        defs["SCALELAB_HIDDEN_TESTS"] = ";".join(str(d) for d in hidden)
        result = build(source, build_dir, defs, args.cmake_arg, sorted({t.binary for t in tests}), args.jobs,
                       args.build_timeout)
        if not result.ok:
            build_failed = compiler_errors(result.log, source, renames=renames)
        binaries = result.binaries
        if args.skip_unlinked and result.ok:
            unlinked = unlinked_binaries(build_dir, lab, changed_files(lab, source, stage), binaries)

    mpiexec = args.mpiexec or cmake_cache_value(build_dir, "MPIEXEC_EXECUTABLE") or shutil.which("mpiexec")
    where = WhereToLook(source)
    outcomes: list[Outcome] = []
    if build_failed is None:
        work = build_dir / "grade-run"
        work.mkdir(parents=True, exist_ok=True)
        outcomes = run_tests(tests, binaries, unlinked, mpiexec, work, args.sanitize, args.test_jobs,
                             lambda t, run, verdict: judge(t, run, where, verdict, renames))

    point_to_narrower_failures(outcomes)
    seconds = time.monotonic() - started
    earned = sum(o.score for o in outcomes)
    summary_lines = [title, f"Score: {fmt_points(earned)}/{fmt_points(total_possible)}"
                     + (" (the build failed)" if build_failed is not None else "")]
    if notes:
        summary_lines += ["", "Files used:"] + ["  " + n for n in notes]
    summary = "\n".join(summary_lines)
    write_json_atomically(results_path, results_json(outcomes, build_failed, total_possible, seconds, summary))

    if args.quiet:
        for o in outcomes:
            o.details = ""
    print_table(title, outcomes, build_failed, total_possible)
    if notes:
        print("\nFiles used:\n" + "\n".join("  " + n for n in notes))
    print(f"\nScore: {fmt_points(earned)}/{fmt_points(total_possible)} in {seconds:.1f} s; "
          f"results written to {results_path}")

    if args.expect == "full":
        bad = [o for o in outcomes if not o.passed and not o.status.startswith("skipped")]
        if build_failed is not None or bad:
            print(f"grade: EXPECTED FULL MARKS, but {'the build failed' if build_failed is not None else ''}"
                  f"{', '.join(o.test.name + ' ' + o.status for o in bad)}", file=sys.stderr)
            return 1
    if args.expect_lose:
        problems = (["the build failed"] if build_failed is not None else []) + \
            unexpected_losses(outcomes, args.expect_lose, args.expect_keep)
        if problems:
            print(f"grade: EXPECTED TO LOSE EXACTLY THE TESTS OF {args.expect_lose}, but: " + "; ".join(problems),
                  file=sys.stderr)
            return 1
    if args.expect == "zero":
        problems = []
        if build_failed is not None:
            problems.append("the build failed")
        for o in outcomes:
            if o.passed:
                problems.append(f"{o.test.name} passed")
            elif o.status.startswith("skipped"):
                continue
            elif o.status != "failed":
                problems.append(f"{o.test.name} {o.status}")
            elif not any(s.startswith(f"Lab {lab}: implement") for s in o.stub_messages):
                problems.append(f"{o.test.name} failed without naming the missing function ('Lab {lab}: implement ...')")
        if problems:
            print("grade: EXPECTED A CLEAN ZERO (the skeleton), but: " + "; ".join(problems), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
