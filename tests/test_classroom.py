"""Grading a class: deterministic shards, one process per worker (one per 4 cores by default),
resumable, one seed."""

import csv
import shutil
import subprocess
import sys

import pytest

from grader.classroom import default_workers, parse_args, parse_shard, shard
from grader.runner import ROOT

STUDENTS = [f"student{i:02d}" for i in range(11)]


@pytest.mark.parametrize("count", [1, 2, 3, 5, 11, 20])
def test_shards_split_the_class_exactly_once(count):
    shards = [shard(list(reversed(STUDENTS)), i, count) for i in range(count)]
    assert sorted(s for part in shards for s in part) == STUDENTS
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    assert shards == [shard(STUDENTS, i, count) for i in range(count)]  # the listing order does not matter


@pytest.mark.parametrize("text", ["2/2", "-1/3", "1", "a/b", "1/0"])
def test_a_bad_shard_is_named(text):
    with pytest.raises(Exception, match="--shard"):
        parse_shard(text)


def test_exercises_may_follow_the_options_as_in_the_usage_line():
    args = parse_args(["submitted", "--out", "grades", "04", "05", "--workers", "8"])
    assert (args.exercises, str(args.out), args.workers) == (["04", "05"], "grades", 8)


@pytest.mark.parametrize(("gpus", "cores", "workers"), [(0, 2, 1), (0, 16, 4), (2, 32, 8), (8, 16, 8), (1, 1, 1)])
def test_default_workers_follow_the_cores_with_one_per_gpu_at_least(gpus, cores, workers):
    assert default_workers(gpus, cores) == workers


def _classroom(*args, seed=True):
    command = [sys.executable, "-m", "grader.classroom", *args] + (["--seed", "5"] if seed else [])
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_a_class_graded_by_two_workers(tmp_path):
    submissions, out = tmp_path / "submitted", tmp_path / "grades"
    for name, source in [("ana", "solutions"), ("ben", "exercises"), ("cy", "solutions")]:
        (submissions / name).mkdir(parents=True)
        shutil.copy(ROOT / source / "02_safe_softmax" / "safe_softmax.py", submissions / name)
    (submissions / "dee").mkdir()  # handed in nothing

    run = _classroom(str(submissions), "02", "--out", str(out), "--workers", "2")
    assert run.returncode == 0, run.stderr
    assert "Shard 0/2" in run.stdout and "Shard 1/2" in run.stdout  # two worker processes
    scores = {row["student"]: float(row["total"]) for row in csv.DictReader((out / "grades.csv").open())}
    assert scores == {"ana": 10, "ben": 0, "cy": 10, "dee": 0}

    (out / "ana.json").write_text("{}")  # an existing result is kept unless --force
    again = _classroom(str(submissions), "02", "--out", str(out), "--shard", "0/2", "--workers", "1")
    assert "2 already graded" in again.stdout and (out / "ana.json").read_text() == "{}"


def test_one_seed_for_the_whole_class(tmp_path):
    (tmp_path / "submitted").mkdir()
    run = _classroom(str(tmp_path / "submitted"), "--out", str(tmp_path / "grades"), seed=False)
    assert run.returncode != 0 and "one seed" in run.stderr
