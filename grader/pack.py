"""What students and graders are given: the course without its solutions.

    python -m grader.pack student    [--out build/student-pack.tar.gz]
    python -m grader.pack gradescope [--out build/gradescope/autograder.zip] [EXERCISES...]

The student pack is the repository's tracked files without solutions/ and tests/ (the mutants
there are edits of the solutions) and without CI: lessons, skeletons, the grader and its checks,
the student runtime. Students run the same checks as the instructor; for credit the inputs come
from the instructor's seed, which no pack contains except the Gradescope autograder's.

The Gradescope autograder is the student pack plus setup.sh (installs the pinned environment once)
and run_autograder (lays out /autograder/submission with grader.submission, grades it with the
instructor's seed into /autograder/results/results.json).
"""

import argparse
import os
import random
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from grader import ROOT

LEFT_OUT = ("solutions/", "tests/", ".ci/")

SETUP = """\
#!/usr/bin/env bash
# Gradescope runs this once, when it builds the autograder's image (base image: Ubuntu 24.04).
set -euo pipefail
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv python3-pip make util-linux
cd "${AUTOGRADER:-/autograder}/source/course"
make doctor  # builds .venv with the course's pinned versions and checks the Triton interpreter
"""

RUN = """\
#!/usr/bin/env bash
# Gradescope runs this for every submission: lay the files out, grade them with the instructor's seed.
set -uo pipefail
A="${{AUTOGRADER:-/autograder}}"
cd "$A/source/course"
PY="${{PYTHON:-.venv/bin/python}}"
rm -rf "$A/work" && mkdir -p "$A/work" "$A/results"
"$PY" -m grader.submission "$A/submission" "$A/work"
COURSE_GRADING_SEED_FILE="$A/source/grading_seed" "$PY" -m grader {exercises} --target "$A/work" \\
    --json "$A/results/results.json"
"""


def student_files() -> list:
    """The repository's tracked files that students may have, as paths relative to ROOT."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    names = [n for n in tracked.decode().split("\0") if n]
    return sorted(n for n in names if not n.startswith(LEFT_OUT) and (ROOT / n).is_file())


def student_pack(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:gz") as tar:
        for name in student_files():
            tar.add(ROOT / name, arcname=f"flash-attention-course/{name}", recursive=False)
    return out


def grading_seed(saved: Path) -> str:
    """The instructor's seed: COURSE_GRADING_SEED, else the one saved beside the autograder, else a new one
    (saved there, readable by its owner only, so a rebuilt autograder grades on the same inputs)."""
    seed = os.environ.get("COURSE_GRADING_SEED") or (saved.read_text().strip() if saved.is_file() else None)
    if seed is None:
        seed = str(random.SystemRandom().randrange(10**9))
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.touch(mode=0o600)
        saved.write_text(seed + "\n")
    if not seed.isdigit():
        raise SystemExit("error: the instructor's grading seed must be a whole number")
    return seed


def gradescope(out: Path, exercises) -> Path:
    seed = grading_seed(out.parent / "grading_seed")
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name in student_files():
            z.write(ROOT / name, f"course/{name}")
        for name, text in (("setup.sh", SETUP), ("run_autograder", RUN.format(exercises=" ".join(exercises)))):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o755 << 16
            z.writestr(info, text)
        z.writestr("grading_seed", seed + "\n")
    return out


def main(argv=None) -> int:
    from grader.exercises import find

    parser = argparse.ArgumentParser(prog="python -m grader.pack", description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("student", "gradescope"))
    parser.add_argument("exercises", nargs="*", help="gradescope: grade only these exercises (default: all)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        numbers = [find(e).number for e in args.exercises]
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    if args.what == "student":
        out = student_pack(args.out or ROOT / "build" / "student-pack.tar.gz")
        print(f"Student pack (no solutions, no tests): {out}")
    else:
        out = gradescope(args.out or ROOT / "build" / "gradescope" / "autograder.zip", numbers)
        print(
            f"Gradescope autograder: {out}\n  upload it as the assignment's autograder (base image Ubuntu 24.04);"
            f" the grading seed is in it and in {out.parent / 'grading_seed'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
