"""Where the test suite's time goes (prints figures; not a test).

    .venv/bin/python bench/bench_suite.py [pytest arguments…]     e.g.  -n 4   or   -m fast

Runs `python -m pytest -q --durations=30 …` once and prints its wall time, the CPU time of pytest and
of everything it started (supervisors and watchdogs detach from pytest, so this process becomes a
child subreaper and reaps them too: their CPU is counted), CPU/wall, the 30 slowest test phases and
the pass/fail line. The environment is the one scripts/test.sh sets (offline hubs, W&B offline).

`--log FILE` keeps pytest's whole output there; `--processes FILE` (implies --by-process) writes one JSON
line per process started (kind, command line, CPU, test, its parent's kind); `--timeline FILE` records
when every test phase ran on which worker (bench/suite_timeline.py) and prints each worker's busy time,
idle gaps and the tests that used most of the workers' own CPU; `--save-durations FILE` writes each test's
seconds from a passing run's timeline (tests/durations.json: the order tests/conftest.py runs the heavy
tests in).
`--by-process` also samples /proc every 0.2 s and
prints the CPU of the processes the suite started, grouped by kind (pytest workers, config probes,
supervisors, run-api, trainers, environments, local servers, …) with how many of each ran: which
start-ups the suite pays for; and grouped by the test that started them (read from their $HERMES_HOME).
A process that lives under 0.2 s is missed, so these sums are
a lower bound of the total above.
"""

from __future__ import annotations

import ctypes
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PR_SET_CHILD_SUBREAPER = 36
ORPHAN_GRACE_S = 10.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# (kind, pattern on the command line): the first match names a process; order matters
PROCESS_KINDS = [
    ("config probe", r"core\.envs\.probe_child"),
    ("watchdog", r"core\.daemons\.watchdog"),
    ("supervisor", r"core\.daemons\.supervisor"),
    ("run-api", r"run-api|atroposlib\.cli\.run_api|api_server"),
    ("warm base", r"core\.daemons\.warm\.base"),
    ("warm server", r"core\.daemons\.warm\.server"),
    ("local tinker server", r"tinker_local"),
    ("trainer", r"dataplane\.trainer"),
    ("environment", r"env_launch|\.py serve\b| serve "),
    ("pytest (main and workers)", r"pytest|xdist|execnet"),
    ("tiny model build", r"tiny_model"),
    ("hermes-rl CLI / tools", r"hermes[-_]rl|hermes_rl"),
    ("other python", r"python"),
    ("other", r"."),
]


def sample_processes(root_pid: int, seen: dict, stop: threading.Event, interval: float = 0.2) -> None:
    """Record the latest (cmdline, cpu seconds) of every descendant of root_pid, keyed by (pid, start)."""
    while not stop.wait(interval):
        now = time.monotonic()
        parents: dict[int, int] = {}
        stats: dict[int, tuple[int, float]] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                raw = Path(f"/proc/{entry.name}/stat").read_text()
            except OSError:
                continue
            fields = raw[raw.rfind(")") + 2 :].split()
            pid = int(entry.name)
            parents[pid] = int(fields[1])
            stats[pid] = (int(fields[19]), (int(fields[11]) + int(fields[12])) / CLOCK_TICKS)
        for pid, (start, cpu) in stats.items():
            ancestor, hops = parents.get(pid), 0
            while ancestor not in (None, 0, 1, root_pid) and hops < 64:
                ancestor, hops = parents.get(ancestor), hops + 1
            if ancestor != root_pid:
                continue
            key = (pid, start)
            if key not in seen:
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                seen[key] = [cmd.strip(), cpu, _test_of(pid), parents.get(pid), now]
            else:
                seen[key][1] = max(seen[key][1], cpu)
                if seen[key][1] == cpu and now - seen[key][4] > 1.0:
                    # a fork of a warm server rewrites its command line after it starts: keep the latest
                    try:
                        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").strip()
                        if command:  # a zombie's is empty
                            seen[key][0], seen[key][4] = command.decode(errors="replace"), now
                    except OSError:
                        pass


_TEST_DIR = re.compile(rb"HERMES_HOME=[^\0]*?/(test_[^/\0]+?)\d*/")


def _test_of(pid: int) -> str:
    """The test whose $HERMES_HOME (pytest's tmp_path/hermes_home, named after the test) a process has."""
    try:
        found = _TEST_DIR.search(Path(f"/proc/{pid}/environ").read_bytes())
    except OSError:
        return "?"
    return found.group(1).decode(errors="replace") if found else "-"


def print_by_test(seen: dict, count: int = 30) -> None:
    """CPU of the processes each test started (the worker's own CPU is not in it), the largest first."""
    totals: dict[str, list] = {}
    for _cmd, cpu, test, *_ in seen.values():
        entry = totals.setdefault(test, [0, 0.0])
        entry[0] += 1
        entry[1] += cpu
    print(f"\nCPU of the processes each test started (by its $HERMES_HOME; pytest truncates the name), top {count}:")
    for test, (procs, cpu) in sorted(totals.items(), key=lambda item: -item[1][1])[:count]:
        print(f"  {cpu:7.1f} s  {procs:4d} processes  {test}")


def kind_of(cmd: str) -> str:
    """The first of PROCESS_KINDS whose pattern the command line matches."""
    return next((name for name, pattern in PROCESS_KINDS if re.search(pattern, cmd)), "other")


def print_by_kind(seen: dict) -> None:
    totals: dict[str, list] = {}
    for cmd, cpu, *_ in seen.values():
        kind = kind_of(cmd)
        entry = totals.setdefault(kind, [0, 0.0, {}])
        entry[0] += 1
        entry[1] += cpu
        if kind.startswith("other") or kind == "config probe":
            entry[2][cmd[-110:] if kind == "config probe" else cmd[:90]] = (
                entry[2].get(cmd[-110:] if kind == "config probe" else cmd[:90], 0.0) + cpu
            )
    print("\nCPU by kind of process (sampled every 0.2 s):")
    print(f"  {'kind':28} {'processes':>9} {'CPU s':>8} {'CPU s each':>10}")
    for kind, (count, cpu, cmds) in sorted(totals.items(), key=lambda item: -item[1][1]):
        print(f"  {kind:28} {count:9d} {cpu:8.1f} {cpu / count:10.2f}")
        for cmd, cmd_cpu in sorted(cmds.items(), key=lambda item: -item[1])[:12]:
            print(f"      {cmd_cpu:7.1f}  {cmd}")


def write_processes(seen: dict, path: Path) -> None:
    """One JSON line per process: pid, its kind, command line, CPU, test, and its parent's kind (a fork of
    a warm server has the server as its parent)."""
    import json

    commands = {pid: cmd for (pid, _start), (cmd, *_rest) in seen.items()}
    with path.open("w", encoding="utf-8") as handle:
        for (pid, _start), (cmd, cpu, test, parent, _at) in seen.items():
            parent_kind = kind_of(commands[parent]) if parent in commands else "outside"
            record = {"pid": pid, "kind": kind_of(cmd), "cmd": cmd[:300], "cpu": cpu, "test": test}
            handle.write(json.dumps({**record, "parent": parent_kind}) + "\n")
    print(f"every sampled process: {path}")


def _children(pid: int) -> list[str]:
    """`pid name` of our live children (orphans reparented to us included)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)
            if entry.name.isdigit() and int(fields[1].split()[1]) == pid:
                found.append(f"{entry.name} {fields[0].split('(', 1)[1]}")
        except (OSError, IndexError, ValueError):
            continue
    return found


def print_timeline(path: Path, started_at: float) -> None:
    """Per worker: when its session started and ended, how long it ran tests, and its idle gaps."""
    import json

    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    print("\nper worker (seconds from the start of the run):")
    print("  worker   session start  first test  last test end  session end  in tests  gaps > 2 s")
    for worker in sorted({r["worker"] for r in records}):
        mine = [r for r in records if r["worker"] == worker]
        phases = sorted((r for r in mine if r["event"] == "phase"), key=lambda r: r["start"])
        if not phases:
            continue
        begin = next((r["time"] for r in mine if r["event"] == "session_start"), phases[0]["start"])
        end = next((r["time"] for r in mine if r["event"] == "session_end"), phases[-1]["end"])
        busy = sum(r["end"] - r["start"] for r in phases)
        gaps = [(b["start"] - a["end"], a["test"]) for a, b in zip(phases, phases[1:], strict=False)]
        big = [g for g in gaps if g[0] > 2]
        print(
            f"  {worker:<8} {begin - started_at:13.1f} {phases[0]['start'] - started_at:11.1f} "
            f"{phases[-1]['end'] - started_at:14.1f} {end - started_at:12.1f} {busy:9.1f}  "
            f"{len(big)} ({sum(g for g, _ in big):.1f} s)"
        )
    by_test: dict[str, float] = {}
    for record in records:
        if record["event"] == "phase" and "cpu" in record:
            by_test[record["test"]] = by_test.get(record["test"], 0.0) + record["cpu"]
    if by_test:
        print(f"\nthe workers' own CPU ({sum(by_test.values()):.1f} s in tests), the 30 largest tests:")
        for test, cpu in sorted(by_test.items(), key=lambda item: -item[1])[:30]:
            print(f"  {cpu:7.1f} s  {test}")


def save_durations(timeline: Path, path: Path) -> None:
    """Each test's seconds (setup, call and teardown) from a timeline, for tests/conftest.py's order."""
    import json

    seconds: dict[str, float] = {}
    for line in timeline.read_text().splitlines():
        record = json.loads(line)
        if record.get("event") == "phase":
            seconds[record["test"]] = seconds.get(record["test"], 0.0) + record["end"] - record["start"]
    path.write_text(json.dumps({test: round(s, 1) for test, s in sorted(seconds.items())}, indent=0) + "\n")
    print(f"durations of {len(seconds)} tests: {path}")


def become_subreaper() -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _pop_option(argv: list[str], name: str) -> Path | None:
    """The value of `name VALUE` in argv (both removed from it), or None."""
    if name not in argv:
        return None
    at = argv.index(name)
    value = Path(argv[at + 1]).resolve()
    del argv[at : at + 2]
    return value


def main(argv: list[str]) -> int:
    by_process = "--by-process" in argv
    argv = [arg for arg in argv if arg != "--by-process"]
    timeline = _pop_option(argv, "--timeline")
    processes_path = _pop_option(argv, "--processes")
    durations_path = _pop_option(argv, "--save-durations")
    log_path = _pop_option(argv, "--log")
    by_process = by_process or processes_path is not None
    own_timeline = durations_path is not None and timeline is None  # the durations come from a timeline
    if own_timeline:
        timeline = Path(tempfile.mkdtemp(prefix="hermes-rl-bench-")) / "timeline.jsonl"
    if timeline is not None:
        timeline.unlink(missing_ok=True)
        argv = ["-p", "bench.suite_timeline", *argv]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "WANDB_MODE": "offline",
        **({"HERMES_RL_SUITE_TIMELINE": str(timeline)} if timeline else {}),
    }
    counted_orphans = become_subreaper()
    started = time.monotonic()
    started_at = time.time()
    pytest = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "--durations=30", "-p", "no:cacheprovider", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []

    def read() -> None:
        for line in pytest.stdout:
            lines.append(line)
            if re.search(r"\b(FAILED|ERROR)\b", line):
                print(line, end="", flush=True)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    seen: dict = {}
    stop_sampling = threading.Event()
    if by_process:
        threading.Thread(target=sample_processes, args=(os.getpid(), seen, stop_sampling), daemon=True).start()
    # Reap pytest and, as a subreaper, every orphan it leaves (detached supervisors, watchdogs).
    # Daemons a test leaves running on purpose (the one-node Slurm cluster) are reparented to us and never
    # end: after pytest, orphans get ORPHAN_GRACE_S to finish, then are left running and named.
    status = None
    reap_until = None
    while True:
        try:
            pid, code = os.waitpid(-1, 0 if reap_until is None else os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            if time.monotonic() >= reap_until:
                break
            time.sleep(0.1)
            continue
        if pid == pytest.pid:
            status = os.waitstatus_to_exitcode(code)
            pytest.returncode = status
            wall = time.monotonic() - started
            if not counted_orphans:
                break
            reap_until = time.monotonic() + ORPHAN_GRACE_S
    left = [] if reap_until is None else _children(os.getpid())
    reader.join(5)
    stop_sampling.set()
    # Orphans still running after pytest ended (none expected) are not waited for past this point.
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    output = "".join(lines)
    # the list ends at a blank line, the next section, or (with -q) the bare summary line
    durations = re.search(
        r"=+ slowest 30 durations =+\n\n?(.*?)(?:\n\n|\n=|\n\d+ (?:passed|failed|error)|\Z)", output, re.S
    )
    summary = [line for line in lines if re.search(r"\d+ (passed|failed|error)", line)]
    print(f"pytest {' '.join(argv) or '(no arguments)'}")
    print(f"wall time            {wall:8.1f} s")
    print(
        f"CPU time             {cpu:8.1f} s  (user {usage.ru_utime:.1f} s, sys {usage.ru_stime:.1f} s; "
        f"{'pytest and every process it started' if counted_orphans else 'pytest and its waited-for children'})"
    )
    print(f"CPU / wall           {cpu / wall:8.2f}  on {os.cpu_count()} cores")
    print(f"peak RSS of one child {usage.ru_maxrss / 1024:7.0f} MB")
    if durations:
        print("\nthe 30 slowest test phases:")
        print(durations.group(1).rstrip())
    if by_process:
        print_by_kind(seen)
        print_by_test(seen)
    if processes_path:
        write_processes(seen, processes_path)
    if timeline and timeline.exists():
        print_timeline(timeline, started_at)
        if durations_path and status == 0:
            save_durations(timeline, durations_path)
    if own_timeline:
        shutil.rmtree(timeline.parent, ignore_errors=True)
    if left:
        print(f"\nstill running after pytest (not counted): {', '.join(left)}")
    if log_path:
        Path(log_path).write_text(output)
        print(f"pytest's whole output: {log_path}")
    print("\n" + (summary[-1].strip() if summary else "(no summary line)"))
    return status if status is not None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
