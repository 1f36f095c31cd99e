"""`python -m grader.classroom`: grade a whole class, split across GPUs and machines.

    python -m grader.classroom SUBMISSIONS --out GRADES [EX ...] [--shard I/N] [--workers W]

SUBMISSIONS holds one folder per student, in any layout `grader.submission` understands (files,
notebooks, a copy of exercises/). Each student's result is GRADES/<student>.json (Gradescope's
format); GRADES/grades.csv is rebuilt from all of them at the end of every run.

- One seed for the whole class: the instructor's (COURSE_GRADING_SEED or COURSE_GRADING_SEED_FILE)
  or --seed. Without one, nothing runs: students must not be graded on different inputs.
- `--shard I/N` grades the students whose position in name order is I modulo N: deterministic, so
  the N jobs of a cluster array (Slurm, Kubernetes indexed jobs) split the class without talking
  to each other.
- `--workers W` grades a shard with W processes, each its own sub-shard and one of the visible GPUs
  (round robin). Grading is mostly compiling, on the CPU: students never share compiled kernels. So
  the default is one worker per 4 CPU cores, at least one per GPU (GPU_RESULTS.md has the timings
  behind that choice).
- A student whose result file exists is skipped (a re-run resumes after a crash or a preempted
  job); --force grades everyone again.
"""

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import env


def parse_shard(text: str) -> tuple:
    """'I/N' -> (I, N), with 0 <= I < N."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: expected I/N, e.g. 0/4") from None
    if not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: I must be 0 .. N-1 (shards are numbered from 0)")
    return index, count


def shard(students: list, index: int, count: int) -> list:
    """The students of shard `index` of `count`: every count-th in name order, from `index`."""
    return sorted(students)[index::count]


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m grader.classroom", description=__doc__.split("\n\n")[0])
    p.add_argument("submissions", type=Path, help="a folder with one folder per student")
    p.add_argument("exercises", nargs="*", help="exercise numbers to grade (default: all)")
    p.add_argument("--out", type=Path, required=True, help="where <student>.json and grades.csv go")
    p.add_argument("--shard", type=parse_shard, default=(0, 1), metavar="I/N", help="grade only shard I of N")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes for this shard (default: one per 4 CPU cores, at least one per GPU)",
    )
    p.add_argument("--seed", type=int, default=None, help="the seed (default: the instructor's)")
    p.add_argument("--force", action="store_true", help="grade again students who already have a result")
    p.add_argument("--time-limit", type=float, default=None, help="seconds per check")
    return p.parse_intermixed_args(argv)  # exercises may follow the options, as the usage line shows


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    missing = env.missing_packages()
    if missing:
        raise SystemExit(env.missing_packages_message(missing, "grader.classroom"))
    from grader.__main__ import choose_seed
    from grader.exercises import EXERCISES, find

    if not args.submissions.is_dir():
        raise SystemExit(f"error: {args.submissions} is not a folder of student submissions")
    if args.out.exists() and not args.out.is_dir():
        raise SystemExit(f"error: --out {args.out} is a file; give the folder for the results")
    try:
        exercises = [find(e) for e in args.exercises] or list(EXERCISES)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    if args.seed is None and not ({"COURSE_GRADING_SEED", "COURSE_GRADING_SEED_FILE"} & set(os.environ)):
        raise SystemExit(
            "error: a class is graded with one seed: set COURSE_GRADING_SEED (or "
            "COURSE_GRADING_SEED_FILE) to the instructor's seed, or pass --seed"
        )
    seed, _ = choose_seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    students = [p.name for p in args.submissions.iterdir() if p.is_dir() and not p.name.startswith(".")]
    mine = shard(students, *args.shard)
    todo = [s for s in mine if args.force or not (args.out / f"{s}.json").exists()]
    print(
        f"Shard {args.shard[0]}/{args.shard[1]}: {len(mine)} of {len(students)} students, "
        f"{len(mine) - len(todo)} already graded",
        flush=True,
    )
    workers = args.workers or default_workers(_gpu_count(), _usable_cores())
    if workers > 1 and len(todo) > 1:
        status = _run_workers(args, workers)
    else:
        status = _grade_students(args.submissions, todo, exercises, seed, args)
    _write_table(args.out, exercises)
    return status


def default_workers(gpus: int, cores: int) -> int:
    """One worker per 4 CPU cores (compiling is the work), at least one per GPU, at least one."""
    return max(1, gpus, cores // 4)


def _usable_cores() -> int:
    """The cores this process may run on (a Slurm or container allocation, not the whole host)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _run_workers(args, workers: int) -> int:
    """This command again, once per worker, each on a sub-shard of this shard and its own GPU."""
    index, count = args.shard
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", ",".join(map(str, range(_gpu_count())))).split(",")
    common = [str(args.submissions), *args.exercises, "--out", str(args.out), "--workers", "1"]
    common += (["--seed", str(args.seed)] if args.seed is not None else []) + (["--force"] if args.force else [])
    common += ["--time-limit", str(args.time_limit)] if args.time_limit else []
    procs = []
    for w in range(workers):
        environment = dict(os.environ)
        if gpus != [""]:
            environment["CUDA_VISIBLE_DEVICES"] = gpus[w % len(gpus)]
        shard = ["--shard", f"{index + w * count}/{count * workers}"]
        procs.append(subprocess.Popen([sys.executable, "-m", "grader.classroom", *common, *shard], env=environment))
    return max(p.wait() for p in procs)


def _grade_students(submissions: Path, students: list, exercises: list, seed: int, args) -> int:
    from grader import report
    from grader.__main__ import write_atomically
    from grader.runner import grade_exercise
    from grader.submission import lay_out

    mode = env.setup()
    time_limit = args.time_limit or (300.0 if mode.gpu else 120.0)
    for student in students:
        start = time.monotonic()
        with tempfile.TemporaryDirectory() as target:
            found = lay_out(submissions / student, Path(target))
            graded = [(ex, grade_exercise(ex, Path(target), seed, time_limit)) for ex in exercises]
        header = (
            f"Student: {student}\nFound: {', '.join(sorted(found)) or 'no exercise file'}\nMode: {mode.description}"
        )
        seconds = time.monotonic() - start
        write_atomically(args.out / f"{student}.json", report.gradescope(graded, header, seconds))
        score = sum(r.earned for _, results in graded for r in results)
        print(f"{student}: {score:g} points ({seconds:.0f} s)", flush=True)
    return 0


def _write_table(out: Path, exercises: list) -> None:
    """grades.csv: one row per student with a result file, one column per exercise, and the total."""
    from grader.__main__ import write_atomically

    rows = []
    for path in sorted(out.glob("*.json")):
        try:
            tests = json.loads(path.read_text())["tests"]
        except (ValueError, KeyError, OSError):
            continue
        per_exercise = {ex.folder: sum(t["score"] for t in tests if ex.folder in t.get("tags", [])) for ex in exercises}
        rows.append({"student": path.stem, **per_exercise, "total": sum(per_exercise.values())})
    table = io.StringIO()
    writer = csv.DictWriter(table, fieldnames=["student", *(ex.folder for ex in exercises), "total"])
    writer.writeheader()
    writer.writerows(rows)
    write_atomically(out / "grades.csv", table.getvalue())


if __name__ == "__main__":
    sys.exit(main())
