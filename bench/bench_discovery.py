"""Discovery and config-probe speed: cold vs cached, with the ratio (figures, not a pass/fail test).

    .venv/bin/python bench/bench_discovery.py            # 1,000 generated environment files + probes
    .venv/bin/python bench/bench_discovery.py --files 300 --nested --no-probe
    .venv/bin/python bench/bench_discovery.py --check PATH/TO/atropos/environments --no-probe
    .venv/bin/python bench/bench_discovery.py --files 20   # small discovery, then the probe figures

Discovery: 1,000 generated files (direct BaseEnv subclasses, subclasses through another scanned
file, helper modules without an environment, a few broken ones), scanned cold (every file parsed),
warm (nothing changed: only stat calls) and after one file changed (one re-parse); and the warm case a
new process sees (each CLI call is one): the parses come from the on-disk cache. `--nested` spreads the
files over folders three levels deep. `--check DIR` compares discovery of a real tree (a clone of the
public Atropos repository's environments/) with an independent, regex-based count of BaseEnv subclasses.
Config probe: a real environment's config_init() in a subprocess (cold), forked from a warm probe
process (what the dashboard, MCP server and agent plugin use), the in-memory cache, the
on-disk cache a second client process reads, and the one-process warm-up of several environments.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BODY = """
    def __init__(self, config, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.buffer = []

    async def setup(self):
        self.items = [{{"question": str(i), "answer": i}} for i in range(100)]

    async def get_next_item(self):
        return self.items.pop() if self.items else None

    async def collect_trajectories(self, item):
        completions = await self.server.completion(prompt=item["question"], n=self.config.group_size)
        scores = [float(c.text.strip() == str(item["answer"])) for c in completions.choices]
        return {{"scores": scores}}, []

    async def evaluate(self, *args, **kwargs):
        return None
"""

DIRECT = (
    '''"""Generated environment {i}: arithmetic drills, level {i}."""
from typing import Tuple, List
from pydantic import Field
from atroposlib.envs.base import BaseEnv, BaseEnvConfig, APIServerConfig


class Gen{i}Config(BaseEnvConfig):
    level: int = Field(default={i}, description="difficulty")


class Gen{i}Env(BaseEnv):
    """Arithmetic drills {i}."""

    name = "gen_{i}"
    env_config_cls = Gen{i}Config

    @classmethod
    def config_init(cls) -> Tuple[Gen{i}Config, List[APIServerConfig]]:
        return Gen{i}Config(), []
'''
    + BODY
)

BASE = (
    '''"""Shared base {i}."""
from atroposlib.envs import base


class Family{i}Base(base.BaseEnv):
    """Family {i} plumbing."""
'''
    + BODY
)

CHILD = '''"""Child {i} of a scanned base."""
from family_{base} import Family{base}Base


class Child{i}Env(Family{base}Base):
    name = "child_{i}"
'''

HELPER = '''"""Helper module {i}: no environment here."""


class Scorer{i}:
    def score(self, text):
        return len(text) % {mod}
'''


def generate(folder: Path, count: int, nested: bool = False) -> dict:
    kinds = {"direct": 0, "base": 0, "child": 0, "helper": 0, "broken": 0}
    root = folder
    for i in range(count):
        slot = i % 20
        if nested:  # a family (base, children, helpers) shares a folder, three levels deep
            folder = root / f"group{i // 100}" / f"family{i // 20}" / f"level3_{i // 20}"
            folder.mkdir(parents=True, exist_ok=True)
        if slot == 19:
            (folder / f"broken_{i}.py").write_text(f"class Broken{i}(BaseEnv:\n    pass\n")
            kinds["broken"] += 1
        elif slot in (17, 18):
            (folder / f"helper_{i}.py").write_text(HELPER.format(i=i, mod=i + 2))
            kinds["helper"] += 1
        elif slot == 0:
            (folder / f"family_{i}.py").write_text(BASE.format(i=i))
            kinds["base"] += 1
        elif slot in (1, 2, 3):
            (folder / f"child_{i}.py").write_text(CHILD.format(i=i, base=i - slot))
            kinds["child"] += 1
        else:
            (folder / f"gen_{i}.py").write_text(DIRECT.format(i=i))
            kinds["direct"] += 1
    return kinds


def timed(fn, repeat: int) -> tuple[float, object]:
    samples, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), result


NEW_PROCESS = (
    "import time; t = time.perf_counter(); from hermes_rl.core.envs import discovery; t1 = time.perf_counter(); "
    "discovery.discover_environments(); print((time.perf_counter() - t1) * 1000)"
)


def new_process_ms() -> float:
    """discover_environments() in a fresh process (what one CLI call pays), excluding interpreter start."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", NEW_PROCESS], capture_output=True, text=True, env=dict(os.environ))
    return float(out.stdout.strip())


def bench_discovery(count: int, nested: bool = False) -> None:
    from hermes_rl.core.envs import discovery

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "envs"
        folder.mkdir()
        kinds = generate(folder, count, nested)
        os.environ["HERMES_RL_ENV_PATH"] = str(folder)
        total_bytes = sum(p.stat().st_size for p in folder.rglob("*.py"))

        def cold():
            discovery.clear_cache(disk=True)
            return discovery.discover_environments()

        cold_ms, envs = timed(cold, 3)
        warm_ms, _ = timed(discovery.discover_environments, 7)
        target = next(folder.rglob("gen_5.py"))

        def one_changed():
            st = target.stat()
            os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
            return discovery.discover_environments()

        changed_ms, _ = timed(one_changed, 5)
        discovery.clear_cache(disk=True)
        process_cold = new_process_ms()  # parses everything, writes the disk cache
        process_warm = statistics.median(new_process_ms() for _ in range(3))
        found = [e for e in envs if e.source == "extra"]
        ok = sum(1 for e in found if e.error is None)
        errors = sum(1 for e in found if e.error)
        print(f"discovery: {count} files{' in nested folders' if nested else ''} ({total_bytes / 1e6:.1f} MB; {kinds})")
        print(f"  found {ok} environments, {errors} broken-file entries")
        print(f"  cold (parse all)        {cold_ms:9.1f} ms   ({cold_ms / count * 1000:.0f} us/file)")
        print(f"  warm (nothing changed)  {warm_ms:9.2f} ms   cold/warm = {cold_ms / warm_ms:.0f}x")
        print(f"  one file changed        {changed_ms:9.2f} ms   cold/one-changed = {cold_ms / changed_ms:.0f}x")
        print(f"  new process, no cache   {process_cold:9.1f} ms")
        print(f"  new process, disk cache {process_warm:9.1f} ms   cold/warm = {process_cold / process_warm:.0f}x")
        os.environ.pop("HERMES_RL_ENV_PATH", None)


def bench_probe() -> None:
    import subprocess

    from hermes_rl.core.envs import probe
    from hermes_rl.core.envs.discovery import find_environment

    env_names = [name for name in ("toy_addition", "gsm8k") if (ROOT / "environments" / f"{name}.py").exists()]
    if not env_names:
        print("config probe: no project environments yet; skipped")
        return
    envs = [find_environment(name) for name in env_names]
    first = envs[0]
    probe.clear_probe_cache(disk=True)
    for env in envs:
        probe.clear_probe_cache(env, disk=True)

    start = time.perf_counter()
    probe.probe_config(first)
    cold_ms = (time.perf_counter() - start) * 1000
    memory_ms, _ = timed(lambda: probe.probe_config(first), 50)

    def from_disk():
        probe.clear_probe_cache(first)
        return probe.probe_config(first)

    disk_ms, _ = timed(from_disk, 20)
    code = (
        "import time; t=time.perf_counter(); from hermes_rl.core.envs.drafts import get_config; "
        f"get_config({first.name!r}); print((time.perf_counter()-t)*1000)"
    )
    second_client = [
        float(
            subprocess.run(
                [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=dict(os.environ)
            ).stdout.strip()
        )
        for _ in range(3)
    ]
    client_ms = statistics.median(second_client)

    # A long-lived client's warm probe process (keep_warm): the first probe starts it, the next ones fork.
    probe.keep_warm()
    try:
        warm = []
        for _ in range(4):
            probe.clear_probe_cache(first, disk=True)
            start = time.perf_counter()
            probe.probe_config(first)
            warm.append((time.perf_counter() - start) * 1000)
    finally:
        probe.keep_warm(False)
    warm_first_ms, warm_next_ms = warm[0], statistics.median(warm[1:])

    for env in envs:
        probe.clear_probe_cache(env, disk=True)
    start = time.perf_counter()
    status = probe.warm_config_cache(envs)
    batch_ms = (time.perf_counter() - start) * 1000
    print(f"config probe: {first.name} ({first.file})")
    print(f"  cold subprocess probe          {cold_ms:9.0f} ms")
    print(f"  warm probe process: first      {warm_first_ms:9.0f} ms   (starts it: imports atroposlib once)")
    print(f"  warm probe process: next       {warm_next_ms:9.0f} ms   cold/warm = {cold_ms / warm_next_ms:,.1f}x")
    print(f"  memory cache                   {memory_ms:9.3f} ms   cold/memory = {cold_ms / memory_ms:,.0f}x")
    print(f"  disk cache (same process)      {disk_ms:9.2f} ms   cold/disk = {cold_ms / disk_ms:,.0f}x")
    print(f"  second client get_config       {client_ms:9.0f} ms   (new process: import core + disk cache)")
    print(
        f"  warm-up of {len(envs)} envs, one process {batch_ms:9.0f} ms   ({status}; "
        f"vs ~{cold_ms * len(envs):.0f} ms probing each alone)"
    )


def independent_count(root: Path) -> set[tuple[str, str]]:
    """(file, class) of every BaseEnv subclass by a different method than discovery's: regexes over the
    text and a by-name fixpoint across all files (no AST, no import resolution)."""
    import re

    skip = {"__pycache__", "site-packages", "node_modules", "venv"}
    classes: list[tuple[str, str, list[str]]] = []
    names = {"BaseEnv"}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        if any(part.startswith(".") or part in skip for part in rel[:-1]):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        names |= set(re.findall(r"\bBaseEnv\s+as\s+(\w+)", text))
        for name, bases in re.findall(r"^class\s+(\w+)\s*\(([^)]*)\)\s*:", text, flags=re.M | re.S):
            parts = [b.strip().split("[")[0].split(".")[-1] for b in bases.split(",") if b.strip()]
            classes.append((str(path), name, [p for p in parts if "=" not in p]))
    found: set[tuple[str, str]] = set()
    changed = True
    while changed:
        changed = False
        for file, name, bases in classes:
            if (file, name) not in found and any(b in names for b in bases):
                found.add((file, name))
                names.add(name)
                changed = True
    return found


def check_tree(root: Path) -> None:
    from hermes_rl.core.envs import discovery

    os.environ["HERMES_RL_ENV_PATH"] = str(root)
    discovery.clear_cache(disk=True)
    start = time.perf_counter()
    envs = [e for e in discovery.discover_environments() if e.root == str(root)]
    ms = (time.perf_counter() - start) * 1000
    ours = {(e.file, e.class_name) for e in envs if e.error is None}
    theirs = independent_count(root)
    files = sum(1 for _ in root.rglob("*.py"))
    print(f"check {root}: {files} Python files, discovered in {ms:.0f} ms (cold)")
    print(
        f"  discovery: {len(ours)} BaseEnv subclasses ({sum(1 for e in envs if e.abstract)} marked as bases, "
        f"{sum(1 for e in envs if e.error)} unreadable files); independent regex count: {len(theirs)}"
    )
    print(
        f"  ids: {len({e.id for e in envs})} unique for {len(envs)} entries; "
        f"names shared: {sorted({e.name for e in envs if e.duplicate_of})}"
    )
    for label, diff in (("missed by discovery", theirs - ours), ("not in the independent count", ours - theirs)):
        for file, cls in sorted(diff):
            print(f"  {label}: {os.path.relpath(file, root)}::{cls}")
    print(f"  notices: {discovery.discovery_notices() or 'none'}")
    os.environ.pop("HERMES_RL_ENV_PATH", None)


BROKEN_ENV = """from atroposlib.envs.base import BaseEnv
import hermes_rl_bench_missing_package


class NeedsMissingEnv(BaseEnv):
    name = "needs_missing"
"""


def bench_failed_probe() -> None:
    """A probe that fails (a missing package): uncached, then cached on disk for a second client process."""
    import subprocess

    from hermes_rl.core.base.errors import BadInput
    from hermes_rl.core.envs import probe
    from hermes_rl.core.envs.discovery import find_environment

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "needs_missing.py").write_text(BROKEN_ENV)
        os.environ["HERMES_RL_ENV_PATH"] = tmp
        env = find_environment("needs_missing")
        start = time.perf_counter()
        try:
            probe.probe_config(env)
        except BadInput as exc:
            message = exc.message
        cold_ms = (time.perf_counter() - start) * 1000
        code = (
            "import time; from hermes_rl.core.envs import probe; from hermes_rl.core.envs.discovery import "
            "find_environment; e = find_environment('needs_missing'); t = time.perf_counter()\n"
            "try: probe.probe_config(e)\nexcept Exception: pass\nprint((time.perf_counter() - t) * 1000)"
        )
        runs = [
            float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip())
            for _ in range(3)
        ]
        os.environ.pop("HERMES_RL_ENV_PATH", None)
    print("failed config probe (a missing package):")
    print(f"  uncached subprocess probe      {cold_ms:9.0f} ms   ({message[-110:]})")
    print(f"  cached failure, second client  {statistics.median(runs):9.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--no-probe", action="store_true", help="skip the config probe part (imports atroposlib)")
    parser.add_argument("--nested", action="store_true", help="spread the files over folders three levels deep")
    parser.add_argument("--check", type=Path, help="compare discovery of this tree with an independent count")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ["HERMES_HOME"] = home
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if args.check:
            check_tree(args.check.resolve())
        else:
            bench_discovery(args.files, args.nested)
        if not args.no_probe:
            bench_failed_probe()
            bench_probe()
    print(f"(machine load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
