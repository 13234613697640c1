"""The shipped serving rows as data: unique ids, a named source and a hash-drawn split, checkable provenance.

The hold-out rule (docs/validation.md) is content-blind: a row added from issue 16 on is `holdout` when
`int(sha1(id), 16) % 3 == 0`, decided before any prediction; the curated rows that predate it are `fit`.
"""

import csv
import hashlib
import re

import pytest

from tenfold.perf.specs.hardware import list_hardware
from tenfold.perf.validation.serving import METRICS, default_runs_path, load_cases

CURATED_ROWS = 32  # the curated research rows come first; rows added from issue 16 on follow them
GITHUB_PINNED = re.compile(r"^https://github\.com/[^/]+/[^/]+/blob/[0-9a-f]{40}/")


@pytest.fixture(scope="module")
def rows() -> list[dict[str, str]]:
    with open(default_runs_path(), newline="") as fh:
        return list(csv.DictReader(fh))


def test_ids_are_unique(rows):
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids))


def test_every_row_names_a_source_and_a_split(rows):
    for r in rows:
        assert r["source"].strip(), r["id"]
        assert r["split"] in ("fit", "holdout"), r["id"]


def test_added_rows_follow_the_hash_rule(rows):
    added = rows[CURATED_ROWS:]
    assert len(added) >= 30
    for r in added:
        drawn = int(hashlib.sha1(r["id"].encode()).hexdigest(), 16) % 3 == 0
        assert (r["split"] == "holdout") == drawn, r["id"]
    assert all(r["split"] == "fit" for r in rows[:CURATED_ROWS])


def test_added_rows_are_complete_and_traceable(rows):
    """Each added row states what a prediction needs and where its value was read."""
    gpus = set(list_hardware())
    for r in rows[CURATED_ROWS:]:
        assert r["gpu"] in gpus and r["metric"] in METRICS, r["id"]
        assert float(r["value"]) > 0, r["id"]
        for key in (
            "num_gpus",
            "tp",
            "pp",
            "ep",
            "attention_dp",
            "weights_precision",
            "input_len",
        ):
            assert r[key].strip(), (r["id"], key)
        # a prefill pool's rate needs no output length; a stated assumption may fill it (assumptions column)
        assert r["output_len"].strip() or r["role"] == "prefill" or "output_len=" in r["assumptions"], r["id"]
        assert r["reliability"] in ("high", "medium", "low"), r["id"]
        assert r["notes"].strip() and r["engine"].strip(), r["id"]
        if r["source_url"].startswith("https://github.com/"):
            assert GITHUB_PINNED.match(r["source_url"]), r["id"]
        else:
            assert r["source_url"].startswith("https://"), r["id"]


def test_rows_of_one_source_share_one_url_and_engine(rows):
    """A source is one publication: its rows cite one page."""
    by_source: dict[str, set[str]] = {}
    for r in rows[CURATED_ROWS:]:
        # revisions of one GitHub page (commit-pinned) are one publication
        page = re.sub(r"/blob/[^/]+/", "/blob/REV/", r["source_url"])
        by_source.setdefault(r["source"], set()).add(page)
    assert all(len(urls) == 1 for urls in by_source.values()), by_source


def test_added_rows_resolve_to_a_configuration():
    """Every added row resolves into a query (architecture, mapping, formats), none refused by the reader."""
    cases = load_cases()[CURATED_ROWS:]
    refused = {c.id: c.reason for c in cases if c.reason}
    assert not refused
