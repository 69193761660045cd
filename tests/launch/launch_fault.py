#!/usr/bin/env python3
"""One bad launch of a multi-rank job, and the checks that it ended well (tests/launch).

Runs COMMAND (an mpiexec line), optionally sends a signal to one rank once rank 0 has printed
a given training step, and checks that the whole job then
  1. exits non-zero,
  2. within LIMIT seconds (from the signal, or from the start when there is none), and
  3. prints output matching every --expect regex (the message that names the rank or setting).

  launch_fault.py --limit 30 --expect 'rank 1 ...' [--signal STOP --rank 1 --after-step 2] -- mpiexec ...

A rank's process is found by its OMPI_COMM_WORLD_RANK (PMIX_RANK) among the launcher's
descendants. Whatever happens, every process of the job is killed before this script ends, a
stopped one included. Standard library only.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time

STEP = re.compile(r"step\s+(\d+)/")


def descendants(root):
    """The pids below root, from /proc (parent links)."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def rank_pid(root, rank):
    """The pid of MPI rank `rank` started under root, or None."""
    wanted = {f"OMPI_COMM_WORLD_RANK={rank}".encode(), f"PMIX_RANK={rank}".encode()}
    for pid in descendants(root):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = set(f.read().split(b"\0"))
        except OSError:
            continue
        if env & wanted:
            return pid
    return None


def kill_all(root, pids):
    for pid in set(pids + descendants(root) + [root]):
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(pid, sig)
            except OSError:
                pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=float, required=True, help="seconds the job may take to end")
    ap.add_argument("--expect", action="append", default=[], help="a regex the output must match")
    ap.add_argument("--signal", choices=["STOP", "KILL"], help="send this to --rank once rank 0 prints a step")
    ap.add_argument("--rank", type=int, default=1)
    ap.add_argument("--after-step", type=int, default=2)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command

    start = time.monotonic()
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                           start_new_session=True)
    lines, reached = [], threading.Event()

    def read():
        for line in job.stdout:
            lines.append(line)
            m = STEP.search(line)
            if m and int(m.group(1)) >= a.after_step:
                reached.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    signalled = []
    failure = None
    try:
        t0 = start
        if a.signal:
            while not reached.wait(0.05):
                if job.poll() is not None or time.monotonic() - start > 60:
                    raise AssertionError(f"rank 0 never printed step {a.after_step}, so no rank was signalled")
            pid = rank_pid(job.pid, a.rank)
            if pid is None:
                raise AssertionError(f"no process of rank {a.rank} found under the launcher (pid {job.pid})")
            os.kill(pid, getattr(signal, "SIG" + a.signal))
            signalled.append(pid)
            t0 = time.monotonic()
            print(f"sent SIG{a.signal} to rank {a.rank} (pid {pid}) after step {a.after_step}")
        try:
            job.wait(timeout=a.limit + 30)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the job hung: still running {a.limit + 30:.0f} s later (limit {a.limit:.0f} s)")
        elapsed = time.monotonic() - t0
        reader.join(5)
        output = "".join(lines)
        print(f"exit status {job.returncode} after {elapsed:.1f} s" + (" from the signal" if a.signal else ""))
        if job.returncode == 0:
            raise AssertionError("the job exited 0, but it was launched badly on purpose: it must exit non-zero")
        if elapsed > a.limit:
            raise AssertionError(f"the job took {elapsed:.1f} s to end; the limit is {a.limit:.0f} s")
        for pattern in a.expect:
            if not re.search(pattern, output):
                raise AssertionError(f"the output does not match '{pattern}'")
    except AssertionError as e:
        failure = str(e)
    finally:
        kill_all(job.pid, signalled)
    # A running job prints a line per step: show its start and its end, where the messages are.
    shown = lines if len(lines) <= 80 else lines[:20] + [f"... ({len(lines) - 80} lines) ...\n"] + lines[-60:]
    print("---- output ----\n" + "".join(shown) + "----------------")
    if failure:
        print(f"FAILED: {failure}")
        return 1
    print("passed: the job ended non-zero within the limit, with the expected message")
    return 0


if __name__ == "__main__":
    sys.exit(main())
