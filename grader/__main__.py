"""`python -m grader`: grade exercises of a course directory (what `make grade` runs)."""

import argparse
import os
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


def choose_seed(given):
    """(seed, header line). For credit, the instructor's seed comes from COURSE_GRADING_SEED or the
    file named by COURSE_GRADING_SEED_FILE and is never printed; otherwise SEED, or a fresh one."""
    if given is not None:
        return given, f"Seed: {given} (SEED={given} reproduces this run)"
    secret = os.environ.get("COURSE_GRADING_SEED")
    if secret is None and os.environ.get("COURSE_GRADING_SEED_FILE"):
        path = Path(os.environ["COURSE_GRADING_SEED_FILE"])
        try:
            secret = path.read_text().strip()
        except OSError as exc:
            raise SystemExit(f"error: COURSE_GRADING_SEED_FILE={path}: {exc.strerror}") from None
    if secret is not None:
        if not secret.isdigit():
            raise SystemExit("error: the instructor's grading seed must be a whole number")
        return int(secret), "Seed: the instructor's grading seed (not shown)"
    seed = random.randrange(1, 10**6)
    return seed, f"Seed: {seed} (SEED={seed} reproduces this run)"


def write_atomically(path: Path, text: str) -> None:
    """Write the whole file or nothing: a temporary file beside it, then a rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from grader.exercises import EXERCISES, find

    try:
        exercises = [find(e) for e in args.exercises] or list(EXERCISES)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    target = resolve_target(args.target)
    seed, seed_line = choose_seed(args.seed)
    try:
        mode = env.setup()
        if not mode.gpu:
            env.check_interpreter()
    except env.BrokenEnvironment as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    time_limit = args.time_limit or (300.0 if mode.gpu else 120.0)
    from grader.sandbox import describe_isolation

    header = (f"Mode: {mode.description}\nVersions: {env.versions()}\nTarget: {target}\n{seed_line}\n"
              f"Isolation: {describe_isolation()}")
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
    if args.json:  # written once, whole, after every student process has ended
        write_atomically(Path(args.json), report.gradescope(graded, header, time.monotonic() - start))
        print(f"\nGradescope results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
