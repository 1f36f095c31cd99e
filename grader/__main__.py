"""`python -m grader`: grade exercises of a course directory (what `make grade` runs)."""

import argparse
import os
import random
import sys
import time
from pathlib import Path

from common import env
from grader import ROOT


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m grader", description="Grade the course's exercises.")
    p.add_argument("exercises", nargs="*", help="exercise numbers (01, 4, ...) or folder names; default: all")
    p.add_argument(
        "--target",
        default="exercises",
        help="'exercises' (default), 'solutions', or a directory laid out like exercises/",
    )
    p.add_argument("--seed", type=int, default=None, help="random seed (default: a fresh one, printed)")
    p.add_argument("--json", default=None, help="also write Gradescope's results.json here")
    p.add_argument(
        "--check",
        action="append",
        default=None,
        metavar="NAME",
        help="run only this check (repeatable; with one exercise), e.g. --check ragged",
    )
    p.add_argument(
        "--time-limit", type=float, default=None, help="seconds each check may take (default: 120 on CPU, 300 on GPU)"
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="on a GPU, compile every kernel again instead of reusing this target's kernels from its last run",
    )
    return p.parse_args(argv)


def resolve_target(name: str) -> Path:
    path = Path(name) if Path(name).exists() else ROOT / name
    if not path.exists():
        raise SystemExit(
            f"error: TARGET {name!r} is not a directory: nothing exists there (try 'exercises', "
            "'solutions' or the path of a folder laid out like exercises/)"
        )
    if not path.is_dir():
        raise SystemExit(
            f"error: TARGET {name!r} is not a directory but a file: TARGET names the folder that holds "
            f"the exercise folders ({_LAYOUT})"
        )
    return path.resolve()


_LAYOUT = "like exercises/: <TARGET>/01_tiled_matmul/matmul.py, <TARGET>/02_safe_softmax/safe_softmax.py, ..."


def validate(args, exercises, target: Path) -> list:
    """Check the arguments before any grading: SystemExit with an explanation for what cannot work,
    and the notes to print for what can (exercise folders missing from TARGET score 0)."""
    from grader.exercises import EXERCISES

    if args.json:
        _check_writable(Path(args.json))
    present = [ex for ex in exercises if (target / ex.folder).is_dir()]
    if len(present) == len(exercises):
        return []
    shown = args.target
    for ex in EXERCISES:  # TARGET one level too deep: the folder of one exercise
        if target.name == ex.folder or (target / f"{ex.module}.py").is_file():
            parent = target.parent
            shown_parent = os.path.relpath(parent) if parent.is_relative_to(Path.cwd()) else parent
            _layout_error(
                args,
                f"error: TARGET {shown} is the folder of exercise {ex.number} itself; TARGET "
                f"names the folder that holds the exercise folders ({_LAYOUT}).\n"
                f"Try: make grade EX={ex.number} TARGET={shown_parent}",
            )
    if not present:
        for inner in sorted(p for p in target.iterdir() if p.is_dir()):  # one level too shallow
            if any((inner / ex.folder).is_dir() for ex in EXERCISES):
                _layout_error(
                    args, f"error: TARGET {shown} holds no exercise folder, but {inner} does.\nTry: TARGET={inner}"
                )
        contents = sorted(p.name + ("/" if p.is_dir() else "") for p in target.iterdir())
        held = f"it holds {', '.join(contents[:8])}" + (", ..." if contents[8:] else "") if contents else "it is empty"
        wanted = ", ".join(f"{ex.folder}/{ex.module}.py" for ex in exercises[:3]) + (", ..." if exercises[3:] else "")
        _layout_error(
            args,
            f"error: TARGET {shown} holds none of the exercise folders asked for ({wanted}): "
            f"{held}.\nTARGET is a folder laid out {_LAYOUT}",
        )
    absent = [ex.folder for ex in exercises if ex not in present]
    return [
        f"Note: TARGET {shown} has no folder {', '.join(absent)}: "
        f"{'that exercise scores' if len(absent) == 1 else 'those exercises score'} 0 "
        f"(expected layout: {_LAYOUT})"
    ]


def _layout_error(args, message: str):
    """Stop before grading; with --json, first write a results.json that says why (score 0), so that
    an autograder shows the student the reason rather than a failed run."""
    if args.json:
        import json

        write_atomically(
            Path(args.json),
            json.dumps(
                {"score": 0.0, "output": message, "visibility": "visible", "stdout_visibility": "visible", "tests": []},
                indent=2,
            ),
        )
    raise SystemExit(message)


def _check_writable(path: Path) -> None:
    if path.is_dir():
        raise SystemExit(f"error: --json {path} is a folder: give a file name, e.g. {path / 'results.json'}")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise SystemExit(f"error: cannot write --json {path}: the folder {folder} does not exist (create it first)")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise SystemExit(f"error: cannot write --json {path}: permission denied")


INSTRUCTOR_SEED = "Seed: the instructor's grading seed (not shown)"


def compile_cache(target: Path, gpu: bool, fresh: bool, seed_line: str):
    """The folder keeping `target`'s compiled kernels between practice runs on a GPU, or None: the
    interpreter compiles nothing, --fresh asks for an empty cache, and a run for credit (the
    instructor's seed) always starts from one. Only the course's own exercises/ and solutions/ keep
    one: a folder graded from elsewhere may hold someone else's files next time, who must not run
    kernels compiled from (or planted by) the last ones."""
    from grader.sandbox import compile_cache_for

    own = Path(target).resolve() in (ROOT / "exercises", ROOT / "solutions")
    return compile_cache_for(target) if gpu and own and not fresh and seed_line != INSTRUCTOR_SEED else None


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
        return int(secret), INSTRUCTOR_SEED
    seed = random.randrange(1, 10**6)
    return seed, f"Seed: {seed} (SEED={seed} reproduces this run)"


def write_atomically(path: Path, text: str) -> None:
    """Write the whole file or nothing: a temporary file beside it, then a rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    missing = env.missing_packages()  # before anything imports torch
    if missing:
        raise SystemExit(env.missing_packages_message(missing, "grader"))
    from grader import zygote

    zygote.start(zygote.likely_device())  # it imports torch and triton for the student processes as we do
    from grader.exercises import EXERCISES, find

    try:
        exercises = [find(e) for e in args.exercises] or list(EXERCISES)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    if args.check:
        if len(exercises) != 1:
            raise SystemExit("error: --check (CHECK=) needs one exercise: make grade EX=04 CHECK=ragged")
        known = [c.name for c in exercises[0].checks]
        unknown = [name for name in args.check if name not in known]
        if unknown:
            raise SystemExit(
                f"error: exercise {exercises[0].number} has no check {', '.join(unknown)}; "
                f"its checks: {', '.join(known)}"
            )
    target = resolve_target(args.target)
    notes = validate(args, exercises, target)
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

    header = (
        f"Mode: {mode.description}\nVersions: {env.versions()}\nTarget: {target}\n{seed_line}\n"
        f"Isolation: {describe_isolation()}"
    )
    print("\n".join([header, *notes]), flush=True)

    from grader import report
    from grader.runner import grade_exercise

    cache = compile_cache(target, mode.gpu, args.fresh, seed_line)
    start, graded = time.monotonic(), []
    for exercise in exercises:
        results = grade_exercise(exercise, target, seed, time_limit, only=args.check, compile_cache=cache)
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
