"""`make clean`: delete what builds and test runs leave behind, never a course's grading work.

build/ is deleted entry by entry, except any folder that holds an nbgrader course with work in it
(submissions, a gradebook, grades, feedback): those are listed and kept. Standard library only, so
that cleaning never needs the course's virtual environment.
"""

import shutil
import sys
from pathlib import Path

from grader import ROOT

# What nbgrader and `make autograde` write into a course directory from students' work.
GRADING_WORK = ("gradebook.db", "submitted", "autograded", "feedback", "downloaded", "grades.csv")


def holds_grading_work(path: Path) -> bool:
    """True when `path` is, or contains, a course directory with submissions or grades."""
    if not path.is_dir() or path.is_symlink():
        return False
    return any(next(path.rglob(name), None) is not None for name in GRADING_WORK)


def clean(root: Path = ROOT) -> list:
    """Delete build/ (but what holds grading work) and .pytest_cache; return the folders kept."""
    kept: list[Path] = []
    shutil.rmtree(root / ".pytest_cache", ignore_errors=True)
    build = root / "build"
    if not build.is_dir():
        return kept
    for entry in sorted(build.iterdir()):
        if holds_grading_work(entry):
            kept.append(entry)
        elif entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    if not kept:
        build.rmdir()
    return kept


def main() -> int:
    for path in clean():
        rel = path.relative_to(ROOT)
        print(
            f"kept {rel}: it holds submissions or grades ({', '.join(GRADING_WORK)}); "
            f"delete it by hand if you really mean to: rm -r {rel}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
