"""A submission laid out as the grader expects: `<target>/<folder>/<module>.py` per exercise.

Students hand in files (`flash_forward.py`), notebooks (`04_flash_forward.ipynb`, or
`<student>_04_flash_forward.ipynb` from nbgrader's collection) or a whole copy of exercises/.
`python -m grader.submission SUBMISSION TARGET` finds each exercise's file (regular files only:
a link could point anywhere on the grading machine) and writes the layout; a notebook's student
code cells become the module.
"""

import argparse
import json
import sys
from pathlib import Path

from common.loader import notebook_code

MAX_FILE = 4 << 20  # bytes


def write_notebook_module(notebook: Path, module: Path) -> None:
    """The student code cells of `notebook` as the module file `module`."""
    try:
        code = notebook_code(json.loads(notebook.read_text(errors="replace")))
    except ValueError:
        code = ["raise SyntaxError('the notebook is not valid JSON')"]
    module.parent.mkdir(parents=True, exist_ok=True)
    module.write_text("\n\n\n".join(code) + "\n")


def _files(submission: Path) -> list:
    return sorted(
        p
        for p in submission.rglob("*")
        if p.is_file()
        and not p.is_symlink()
        and p.stat().st_size <= MAX_FILE
        and not any(part.startswith(".") for part in p.relative_to(submission).parts)
    )


def lay_out(submission: Path, target: Path) -> dict:
    """{folder: the submitted file used} for each exercise found in `submission`, written to `target`."""
    from grader.exercises import EXERCISES

    found = {}
    files = _files(submission)
    for ex in EXERCISES:
        module = next((p for p in files if p.name == f"{ex.module}.py"), None)
        notebook = next((p for p in files if p.suffix == ".ipynb" and p.stem.endswith(ex.folder)), None)
        destination = target / ex.folder / f"{ex.module}.py"
        if module is not None:
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(module.read_bytes())
            found[ex.folder] = module
        elif notebook is not None:
            write_notebook_module(notebook, destination)
            found[ex.folder] = notebook
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.submission", description=__doc__.split("\n\n")[0])
    parser.add_argument("submission", type=Path, help="the folder the student handed in")
    parser.add_argument("target", type=Path, help="where to write <folder>/<module>.py")
    args = parser.parse_args(argv)
    if not args.submission.is_dir():
        raise SystemExit(f"error: {args.submission} is not a folder")
    found = lay_out(args.submission, args.target)
    for folder, path in found.items():
        print(f"{folder}: {path.relative_to(args.submission)}")
    if not found:
        print("no exercise file found: expected e.g. matmul.py or 01_tiled_matmul.ipynb", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
