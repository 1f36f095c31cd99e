"""The course as Jupyter notebooks: built from the lessons and solutions, graded by the same checks.

A notebook holds, in order: the lesson (markdown, one cell per section), a read-only set-up cell,
the exercise's code (a cell holding a ### BEGIN/END SOLUTION region is an nbgrader solution cell)
and one read-only test cell per check. A test cell calls run_check_cell, which runs that one check
in-process on the functions the notebook defined, prints its report and returns the points earned:
nbgrader reads a test cell's last value as partial credit. Students run the same cells to check
their work.

`python -m grader.notebooks NOTEBOOK...` executes notebooks with nbclient and ipykernel (no nbgrader
needed, e.g. on a GPU box) and prints what each test cell earned.
"""

import ast
import contextlib
import io
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path

from grader import ROOT
from grader.skeletons import BEGIN

SEED = 20261130  # checks in notebooks use fixed inputs, so a regrade gives the same score
KERNEL_STARTS = 3  # tries to start a notebook's kernel (see with_kernel_restarts)
CELL_TIMEOUT = 600  # seconds: a first Triton compile + autotune on a GPU, or the interpreter on a CPU


# ----------------------------------------------------------------------------- test cells
def run_check_cell(exercise_key: str, check_name: str, namespace: dict) -> float:
    """Run one check on the functions defined in a notebook; print its report; return the points.

    Nothing reaches stderr (nbgrader scores a test cell that writes there 0): warnings are
    silenced and anything else written to stderr is shown on stdout.
    """
    with _stderr_to_stdout():
        from common import env
        from grader.core import Context, run_check
        from grader.exercises import find
        from grader.loader import LocalImplementation
        from grader.report import exercise_report
        from grader.turns import gpu_turn

        exercise = find(exercise_key)
        chk = next((c for c in exercise.checks if c.name == check_name), None)
        if chk is None:
            raise LookupError(
                f"the grader has no check {check_name!r} for exercise {exercise.number} any more: "
                "this notebook is older than the installed course package"
            )
        mode = env.setup()
        impl = LocalImplementation(namespace, "this notebook", exercise.kernels_only, siblings=_siblings(namespace))
        ctx = Context(device=mode.device, seed=SEED)
        with gpu_turn(chk, ctx):
            result = run_check(chk, impl, ctx)
    print(exercise_report(exercise, [result]))
    if result.status == "needs a GPU":
        print("  In nbgrader this check scores 0 without a GPU: autograde on a GPU to grade it.")
    return float(result.earned)


def _siblings(namespace: dict):
    """Loads the student's other exercises (07 uses 04-06) from the folders next to the notebook's."""
    from common.loader import load_sibling, use_course

    anchor = namespace.get("__file__") or os.path.abspath("notebook.py")
    use_course(Path(anchor).resolve().parent.parent)  # exercise 08 measures the student's 04 and 07
    return lambda folder, module: load_sibling(anchor, folder, module)


@contextlib.contextmanager
def _stderr_to_stdout():
    """Silence warnings and move stderr output (from Python or C code) to stdout."""
    sys.stderr.flush()
    saved_fd = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        python_stderr = io.StringIO()
        os.dup2(captured.fileno(), 2)
        try:
            with contextlib.redirect_stderr(python_stderr):
                yield
        finally:
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            captured.seek(0)
            text = python_stderr.getvalue() + captured.read().decode(errors="replace")
            if text.strip():
                print(text.rstrip())


# ----------------------------------------------------------------------------- building
def source_notebook(exercise):
    """The instructor's notebook of `exercise`: lesson, set-up, solution code, one test per check."""
    import nbformat.v4 as nbf

    lesson = ROOT / "exercises" / exercise.folder / "README.md"
    solution = ROOT / "solutions" / exercise.folder / f"{exercise.module}.py"
    for path in (lesson, solution):
        if not path.is_file():
            raise FileNotFoundError(f"exercise {exercise.number} has no {path.relative_to(ROOT)}")
    cells = [nbf.new_markdown_cell(text) for text in lesson_sections(lesson.read_text())]
    cells += [
        nbf.new_markdown_cell(
            "## Set-up\nRun this first: it picks the GPU, or Triton's CPU "
            "interpreter where there is none, before Triton is imported."
        ),
        nbf.new_code_cell(_setup_cell(solution), metadata=_nbgrader(f"{exercise.folder}-setup", locked=True)),
    ]
    cells.append(
        nbf.new_markdown_cell(
            f"## Your code\nThe code of `{solution.name}`: fill in the parts "
            "marked TODO. Run each cell after editing it."
        )
    )
    for code in _code_cells(solution.read_text()):
        if BEGIN in code:
            grade_id = f"{exercise.folder}-solution-{_defined_name(code)}"
            cells.append(nbf.new_code_cell(code, metadata=_nbgrader(grade_id, solution=True)))
        else:
            cells.append(nbf.new_code_cell(code))
    cells.append(
        nbf.new_markdown_cell(
            "## Checks\nEach cell runs one check of the grader on your code and prints what it found. "
            "Run them as often as you like: the autograder runs exactly these cells."
        )
    )
    for chk in exercise.checks:
        points = f"{chk.points:g} point" + ("" if chk.points == 1 else "s")
        source = TEST_CELL.format(name=chk.name, points=points, description=chk.description, number=exercise.number)
        cells.append(
            nbf.new_code_cell(
                source, metadata=_nbgrader(f"{exercise.folder}-{chk.name}", grade=True, locked=True, points=chk.points)
            )
        )
    return nbf.new_notebook(cells=cells, metadata=NOTEBOOK_METADATA)


SETUP_CELL = """\
# Set-up (read-only). The course package must be installed: `pip install -e .` in the course repository.
from common import env

MODE = env.setup()
if not MODE.gpu:
    env.check_interpreter()  # explains the known-broken triton/numpy pairs
print(f"Mode: {MODE.description}")"""

# A module that imports your other exercises (07 uses 04-06) finds them from its own path.
SIBLINGS = """

# {name} finds your other exercises in the folders next to this notebook's folder.
import os

__file__ = os.path.abspath("{name}")"""


def _setup_cell(solution: Path) -> str:
    uses_siblings = "__file__" in solution.read_text()
    return SETUP_CELL + (SIBLINGS.format(name=solution.name) if uses_siblings else "")


TEST_CELL = """\
# Check {name} ({points}): {description}
from grader.notebooks import run_check_cell

run_check_cell("{number}", "{name}", globals())"""

NOTEBOOK_METADATA = {
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
    "language_info": {"name": "python"},
}


def _nbgrader(grade_id, grade=False, solution=False, locked=False, points=None) -> dict:
    meta = {"schema_version": 3, "grade_id": grade_id, "grade": grade, "solution": solution, "locked": locked}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def lesson_sections(markdown: str) -> list:
    """The lesson split into one piece per heading (headings inside code fences do not count)."""
    sections: list[list[str]] = []
    current: list[str] = []
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if line.startswith("#") and not fenced and current:
            sections.append(current)
            current = []
        current.append(line)
    sections.append(current)
    return [text for text in ("\n".join(s).strip() for s in sections) if text]


def _code_cells(source: str) -> list:
    """The module's cells, the code after its last solution region joined to that region's cell:
    nbgrader puts a deleted test cell back right after the last solution cell before it, which
    must come after all the code the test needs."""
    cells = module_cells(source)
    last = max(i for i, cell in enumerate(cells) if BEGIN in cell)
    return cells[:last] + ["\n\n\n".join(cells[last:])]


def module_cells(source: str) -> list:
    """A module split into cells: the leading statements (docstring, imports, constants), then one
    cell per top-level function or class (with its decorators and the comments just above it)."""
    lines = source.splitlines()
    starts = [0]
    previous_was_definition = False
    for node in ast.parse(source).body:
        is_definition = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        if is_definition or previous_was_definition:
            starts.append(_first_line(node, lines))
        previous_was_definition = is_definition
    bounds = zip(sorted(set(starts)), sorted(set(starts))[1:] + [len(lines)])
    cells = ["\n".join(lines[start:end]).strip("\n") for start, end in bounds]
    return [cell for cell in cells if cell.strip()]


def _first_line(node, lines) -> int:
    """Index of a statement's first line, counting its decorators and the comment lines above it."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
    while first > 0 and lines[first - 1].lstrip().startswith("#"):
        first -= 1
    return first


def _defined_name(code: str) -> str:
    """The first top-level function or class a cell defines: the name of its solution cell."""
    names = re.findall(r"^(?:def|class) (\w+)", code, flags=re.MULTILINE)
    return names[0] if names else "code"


def graded_cells(nb) -> list:
    """The graded cells of a notebook."""
    return [c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade")]


# ----------------------------------------------------------------------------- executing
def course_environment() -> dict:
    """os.environ for nbgrader and kernels started from here: the course repository on PYTHONPATH,
    this Python's scripts first on PATH (nbgrader runs `alembic`, even from a venv not activated)."""
    return os.environ | {
        "PYTHONPATH": _prepend(str(ROOT), os.environ.get("PYTHONPATH", "")),
        "PATH": _prepend(str(Path(sys.executable).parent), os.environ.get("PATH", "")),
    }


def _prepend(path: str, paths: str) -> str:
    return os.pathsep.join(dict.fromkeys([path] + [p for p in paths.split(os.pathsep) if p]))


def cell_score(cell) -> float:
    """What nbgrader gives a test cell: 0 on an error or any stderr output, else its last value
    (partial credit) when it is a number, else full points."""
    points = float(cell.metadata["nbgrader"]["points"])
    for output in cell.get("outputs", []):
        if output.output_type == "error" or (output.output_type == "stream" and output.name == "stderr"):
            return 0.0
        if output.output_type == "execute_result":
            try:
                return min(max(float(output.data["text/plain"]), 0.0), points)
            except ValueError:
                return points
    return points


def cell_text(cell) -> str:
    """The printed output of a cell, with its error if it raised."""
    parts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            parts.append(f"[{output.name}] {output.text}" if output.name == "stderr" else output.text)
        elif output.output_type == "error":
            parts.append(f"{output.ename}: {output.evalue}\n")
    return "".join(parts).rstrip()


def execute(path: Path, timeout: int = CELL_TIMEOUT):
    """Run a notebook top to bottom in its folder; return it with outputs, and why it stopped early
    (None when every cell ran)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    nb = nbformat.read(path, as_version=4)

    def run():
        folder = str(Path(path).resolve().parent)
        client = NotebookClient(
            nb, timeout=timeout, kernel_name="python3", allow_errors=True, resources={"metadata": {"path": folder}}
        )
        client.execute(env=course_environment())

    try:
        with_kernel_restarts(run)
    except DeadKernelError as exc:
        return nb, f"the kernel died ({exc}): os._exit, a segfault or out of memory"
    return nb, None


def with_kernel_restarts(run, starts: int = KERNEL_STARTS):
    """run(), run again when its kernel died before running a cell. jupyter_client finds free ports,
    frees them, and the kernel binds them later: kernels started at the same moment (a class's
    notebooks executed side by side) can pick the same port, and one of them dies at once."""
    for _ in range(starts - 1):
        try:
            return run()
        except RuntimeError as exc:
            if "died before replying to kernel_info" not in str(exc):
                raise
    return run()


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m grader.notebooks",
        description="Execute notebooks and print what each test cell earned. Exits 0 "
        "when every test cell earned its points, those of checks that need a GPU "
        "excepted where there is none (they are pending).",
    )
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=CELL_TIMEOUT, help="seconds per cell (default: 600)")
    args = parser.parse_args(argv)
    from common import env

    missing = env.missing_packages(("nbformat", "nbclient", "ipykernel", *env.COURSE_PACKAGES))
    if missing:
        raise SystemExit(env.missing_packages_message(missing, "grader.notebooks"))
    for path in args.notebooks:
        if not path.is_file():
            raise SystemExit(f"error: no notebook {path}")
    full_marks = True
    for path in args.notebooks:
        nb, stopped = execute(path, args.timeout)
        print(f"== {path}")
        earned = possible = waiting = 0.0
        for cell in graded_cells(nb):
            points = float(cell.metadata["nbgrader"]["points"])
            score = cell_score(cell) if cell.get("execution_count") else 0.0  # a cell that never ran earns 0
            earned, possible = earned + score, possible + points
            waiting += points if score == 0 and is_pending(cell) else 0.0
            print(f"-- {cell.metadata['nbgrader']['grade_id']}: {score:g}/{points:g}")
            print(cell_text(cell))
        if stopped:
            print(f"!! {stopped}")
        need = "needs" if waiting == 1 else "need"
        note = f" ({waiting:g} of them {need} a GPU: pending, not run here)" if waiting else ""
        print(f"Total: {earned:g}/{possible:g}{note}\n")
        full_marks &= earned + waiting == possible and not stopped
    return 0 if full_marks else 1


def is_pending(cell) -> bool:
    """True for a test cell whose check needs a GPU and was not run (no GPU where it ran)."""
    from grader.report import MARK, PENDING

    return f"[{MARK[PENDING]}]" in cell_text(cell)


if __name__ == "__main__":
    sys.exit(main())
