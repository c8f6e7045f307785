"""Every file hermes-rl writes is opened like run state: the run summary index (SQLite) and the metrics
digest follow no symlink, take only regular files, replace a foreign file whole (never "rebuild" it by
dropping its tables), validate what they read back (one row of the right shape and the wrong types is a
miss, not an error in every listing), and a digest is invalidated by what its file holds, not only by
its inode and size."""

from __future__ import annotations

import json
import os
import sqlite3
import time

import pytest

from hermes_rl.core.base.paths import rl_dir
from hermes_rl.core.readers.metrics_digest import DIGEST_FILE, MetricsDigest
from hermes_rl.core.runs.index import INDEX_FILE
from tests.test_scale import fresh_process_listing, make_run

pytestmark = [pytest.mark.reliability]


def _foreign_db(path) -> bytes:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE runs (id INTEGER, what TEXT)")
    db.execute("CREATE TABLE precious (x TEXT)")
    db.execute("INSERT INTO precious VALUES ('keep me')")
    db.execute("INSERT INTO runs VALUES (1, 'theirs')")
    db.commit()
    db.close()
    os.chmod(path, 0o644)
    return path.read_bytes()


@pytest.fixture
def two_runs(hermes_home):
    now = time.time()
    make_run("000000a1", created_at=now - 30, steps=3)
    make_run("000000b2", created_at=now - 20, steps=4, status="failed", reason="trainer exited with code 1")
    return ["000000b2", "000000a1"]


def test_a_symlink_at_the_index_path_is_replaced_not_followed(two_runs, tmp_path):
    outside = tmp_path / "outside.db"
    before = _foreign_db(outside)
    rl_dir().mkdir(parents=True, exist_ok=True)
    (rl_dir() / INDEX_FILE).symlink_to(outside)
    assert [r["run_id"] for r in fresh_process_listing()] == two_runs
    assert outside.read_bytes() == before and oct(outside.stat().st_mode & 0o777) == "0o644"
    index = rl_dir() / INDEX_FILE
    assert not index.is_symlink() and index.is_file() and index.stat().st_mode & 0o777 == 0o600
    assert [r["run_id"] for r in fresh_process_listing()] == two_runs


def test_a_foreign_database_is_replaced_whole(two_runs, tmp_path):
    index = rl_dir() / INDEX_FILE
    rl_dir().mkdir(parents=True, exist_ok=True)
    before = _foreign_db(index)
    os.link(index, tmp_path / "their-name.db")  # the same file under another name: is it changed?
    assert [r["run_id"] for r in fresh_process_listing()] == two_runs
    assert (tmp_path / "their-name.db").read_bytes() == before  # their tables never dropped
    assert os.stat(index).st_ino != os.stat(tmp_path / "their-name.db").st_ino


def test_a_journal_link_is_not_written_through(two_runs, tmp_path):
    fresh_process_listing()  # an index of ours
    outside = tmp_path / "victim.txt"
    outside.write_text("precious\n")
    (rl_dir() / f"{INDEX_FILE}-journal").symlink_to(outside)
    make_run("000000c3", created_at=time.time() - 10, steps=2)  # a new row to write
    assert [r["run_id"] for r in fresh_process_listing()][0] == "000000c3"
    assert outside.read_text() == "precious\n"


@pytest.mark.parametrize(
    ("field", "value"),
    [("created_at", "yesterday"), ("status", 5), ("_activity", 7), ("tokens", {"sampled": "many"}), ("step", [])],
)
def test_a_row_of_the_right_shape_and_wrong_types_is_a_miss(two_runs, field, value):
    expected = fresh_process_listing()
    db = sqlite3.connect(rl_dir() / INDEX_FILE)
    (run_id, text), *_ = db.execute("SELECT run_id, summary FROM runs WHERE run_id = '000000a1'").fetchall()
    from hermes_rl.core.runs.store import _ROW_KEYS

    row = json.loads(text)
    row[_ROW_KEYS.index(field)] = value
    db.execute("UPDATE runs SET summary = ? WHERE run_id = ?", (json.dumps(row), run_id))
    db.commit()
    db.close()
    assert fresh_process_listing() == expected  # summarised again from its folder
    assert fresh_process_listing() == expected


def _rows(n: int, reward: float, start: float = 0.0) -> str:
    return "".join(json.dumps({"step": s, "time": start + s, "reward/mean": reward}) + "\n" for s in range(1, n + 1))


def test_a_digest_sees_a_rewrite_of_the_same_length_or_longer(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(_rows(5, 0.1))
    assert MetricsDigest(tmp_path).update().final()["reward/mean"] == 0.1
    with open(metrics, "r+") as handle:  # rewritten in place: same inode, same size, other values
        handle.write(_rows(5, 0.9))
    assert MetricsDigest(tmp_path).update().final()["reward/mean"] == 0.9
    with open(metrics, "r+") as handle:  # and longer
        handle.write(_rows(6, 0.5))
    digest = MetricsDigest(tmp_path).update()
    assert digest.final()["reward/mean"] == 0.5 and digest.key_summary("reward/mean")["best"] == 0.5


def test_a_digest_follows_no_symlink_and_ignores_wrong_values(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(_rows(5, 0.2))
    planted = tmp_path / "planted.json"
    good = MetricsDigest(tmp_path).update()
    stored = json.loads((tmp_path / DIGEST_FILE).read_text())
    stored["metrics.jsonl"]["keys"]["reward/mean"] = [1, 99.0, 5, 99.0, 5, 99.0]  # a digest that lies
    planted.write_text(json.dumps(stored))
    (tmp_path / DIGEST_FILE).unlink()
    (tmp_path / DIGEST_FILE).symlink_to(planted)
    assert MetricsDigest(tmp_path).update().final() == good.final()  # read from the file, not the link
    stored["metrics.jsonl"]["keys"]["reward/mean"] = ["one", None, 5, "x", 5, {}]  # right shape, wrong types
    (tmp_path / DIGEST_FILE).unlink()
    (tmp_path / DIGEST_FILE).write_text(json.dumps(stored))
    digest = MetricsDigest(tmp_path).update()
    assert digest.final() == good.final() and digest.key_summary("reward/mean") == good.key_summary("reward/mean")
    assert digest.series("reward/mean") == good.series("reward/mean")


def test_caches_are_read_without_following_a_link(hermes_home, tmp_path):
    from hermes_rl.core.base.fsutil import read_regular_text
    from hermes_rl.core.envs import discovery

    target = tmp_path / "planted.json"
    target.write_text('{"version": 0}')
    link = tmp_path / "cache.json"
    link.symlink_to(target)
    with pytest.raises(OSError):
        read_regular_text(link, follow=False)
    assert read_regular_text(link) == '{"version": 0}'  # a reader of the user's own files may follow one
    # the discovery cache: a planted link is not read (its entries would be listed as environments)
    cache = discovery._disk_cache_path()
    cache.parent.mkdir(parents=True, exist_ok=True)
    scan = discovery._FileScan(module_doc="forged").to_json()
    forged = {"version": discovery.CACHE_VERSION, "files": {"/nowhere/forged.py": [0, 0, scan]}}
    target.write_text(json.dumps(forged))
    cache.write_text(json.dumps(forged))
    discovery._load_disk_cache()  # the same file, regular: taken (the test's own check of itself)
    assert discovery._file_cache.pop("/nowhere/forged.py", None) is not None
    cache.unlink()
    cache.symlink_to(target)
    discovery._load_disk_cache()
    assert discovery._file_cache.pop("/nowhere/forged.py", None) is None


def test_a_probe_result_of_the_wrong_shape_is_not_taken_from_disk():
    from hermes_rl.core.envs.probe import _valid_result

    assert _valid_result({"ok": True, "fields": [{"name": "task", "type": "str"}]})
    for bad in ({"ok": True, "fields": "task"}, {"ok": True, "fields": [["task"]]}, {"fields": []}, [], None):
        assert not _valid_result(bad)
