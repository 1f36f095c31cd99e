"""`python -m grader`: grade exercises of a course directory (what `make grade` runs)."""

import argparse
import random
import sys
import time
from pathlib import Path

from common import env

ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m grader", description="Grade the course's exercises.")
    p.add_argument("exercises", nargs="*", help="exercise numbers (01, 4, ...) or folder names; default: all")
    p.add_argument("--target", default="exercises",
                   help="'exercises' (default), 'solutions', or a directory laid out like exercises/")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: a fresh one, printed)")
    p.add_argument("--json", default=None, help="also write Gradescope's results.json here")
    p.add_argument("--time-limit", type=float, default=None,
                   help="seconds each check may take (default: 120 on CPU, 300 on GPU)")
    return p.parse_args(argv)


def resolve_target(name: str) -> Path:
    path = Path(name) if Path(name).exists() else ROOT / name
    if not path.is_dir():
        raise SystemExit(f"error: TARGET {name!r} is not a directory (try 'exercises', 'solutions' or a path)")
    return path.resolve()


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from grader.exercises import EXERCISES, find

    try:
        exercises = [find(e) for e in args.exercises] or list(EXERCISES)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    target = resolve_target(args.target)
    seed = args.seed if args.seed is not None else random.randrange(1, 10**6)
    try:
        mode = env.setup()
        if not mode.gpu:
            env.check_interpreter()
    except env.BrokenEnvironment as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    time_limit = args.time_limit or (300.0 if mode.gpu else 120.0)
    header = f"Mode: {mode.description}\nVersions: {env.versions()}\nTarget: {target}\nSeed: {seed} (SEED={seed} reproduces this run)"
    print(header, flush=True)

    from grader import report
    from grader.runner import grade_exercise

    start, graded = time.monotonic(), []
    for exercise in exercises:
        results = grade_exercise(exercise, target, seed, time_limit)
        graded.append((exercise, results))
        print("\n" + report.exercise_report(exercise, results), flush=True)
    if len(graded) > 1:
        print(report.summary_table(graded))
    if args.json:
        Path(args.json).write_text(report.gradescope(graded, header, time.monotonic() - start))
        print(f"\nGradescope results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
