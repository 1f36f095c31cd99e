"""Generate the student skeletons (exercises/) from the instructor solutions (solutions/).

Each region between `### BEGIN SOLUTION` and `### END SOLUTION` becomes a stub that fails with
"not implemented yet": inside a @triton.jit function a tl.static_assert (a `raise` does not compile
for a GPU), elsewhere a NotImplementedError. `python -m grader.skeletons --check` reports drift.

Students edit the files in exercises/, so writing there never replaces work: a file is only
overwritten when it still is a generated skeleton (of the solutions as they are, or as committed).
Anything else is listed and left alone, unless --force; --out DIR writes the skeletons elsewhere.
"""

import argparse
import re
import subprocess
import sys
from pathlib import Path

from grader import ROOT

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
_DEF = re.compile(r"^(\s*)def (\w+)\(")


def _enclosing_function(lines, index):
    """(name, is_triton_kernel) of the function around line `index`, or (None, False)."""
    indent = len(lines[index]) - len(lines[index].lstrip())
    for i in range(index - 1, -1, -1):
        match = _DEF.match(lines[i])
        if match and len(match.group(1)) < indent:
            decorators = []
            j = i - 1
            while j >= 0 and lines[j].strip().startswith("@"):
                decorators.append(lines[j])
                j -= 1
            return match.group(2), any("triton.jit" in d for d in decorators)
    return None, False


def stub(lines, index) -> list:
    """The stub lines replacing the solution region that starts at line `index`."""
    indent = lines[index][: len(lines[index]) - len(lines[index].lstrip())]
    name, is_kernel = _enclosing_function(lines, index)
    what = f"not implemented yet: {name or 'this part'}"
    failing = f'tl.static_assert(False, "{what}")' if is_kernel else f'raise NotImplementedError("{what}")'
    return [f"{indent}# TODO: your code here (the lesson, README.md, says what to do)", f"{indent}{failing}"]


def make_skeleton(source: str, where: str = "<source>") -> str:
    lines, out, begin = source.splitlines(), [], None
    for i, line in enumerate(lines):
        marker = line.strip()
        if marker == BEGIN:
            if begin is not None:
                raise ValueError(f"{where}:{i + 1}: nested {BEGIN} (the one at line {begin + 1} is still open)")
            begin = i
            out.extend(stub(lines, i))
        elif marker == END:
            if begin is None:
                raise ValueError(f"{where}:{i + 1}: {END} without a {BEGIN}")
            begin = None
        elif begin is None:
            out.append(line)
    if begin is not None:
        raise ValueError(f"{where}:{begin + 1}: {BEGIN} is never closed")
    return "\n".join(out) + "\n"


def expected_skeletons(root: Path = ROOT) -> dict:
    """{path under exercises/: generated text} for every solution module."""
    skeletons = {}
    for solution in sorted((root / "solutions").glob("*/*.py")):
        target = root / "exercises" / solution.parent.name / solution.name
        skeletons[target] = make_skeleton(solution.read_text(), str(solution.relative_to(root)))
    return skeletons


def _committed(path: Path, root: Path):
    """The text of `path` in git's HEAD, or None (no git, not a repository, or not committed)."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), "show", f"HEAD:{path.relative_to(root).as_posix()}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _stub_count(text: str) -> int:
    return text.count('"not implemented yet: ')


def replaceable(path: Path, new_text: str, root: Path = ROOT) -> bool:
    """True when writing `new_text` to `path` loses nothing: the file is missing, already holds it,
    or is a generated skeleton: the one the committed solution gives, or the committed file itself
    while that still holds a stub for every solution region (not a student's committed work)."""
    if not path.exists() or path.read_text() == new_text:
        return True
    current = path.read_text()
    solution = root / "solutions" / path.parent.name / path.name
    committed_solution = _committed(solution, root)
    if committed_solution is not None and current == make_skeleton(committed_solution, str(solution)):
        return True
    committed = _committed(path, root)
    return (
        committed is not None
        and current == committed
        and committed_solution is not None
        and _stub_count(committed) >= committed_solution.count(BEGIN)
    )


def write_skeletons(root: Path = ROOT, out=None, force: bool = False) -> list:
    """Write every skeleton into root/exercises (or `out`); return the files left alone because
    they hold edits (never when `force`)."""
    refused = []
    for path, text in expected_skeletons(root).items():
        if out is not None:
            path = Path(out) / path.relative_to(root / "exercises")
            safe = not path.exists() or path.read_text() == text
        else:
            safe = replaceable(path, text, root)
        if not (safe or force):
            refused.append(path)
            continue
        if path.exists() and path.read_text() == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {_shown(path, root)}")
    return refused


def _shown(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def main(argv) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.skeletons", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report skeletons that differ from solutions/")
    parser.add_argument("--force", action="store_true", help="overwrite skeletons in exercises/ even if edited")
    parser.add_argument("--out", type=Path, default=None, help="write the skeletons under this folder instead")
    args = parser.parse_args(argv)
    if args.check:
        drift = [
            str(p.relative_to(ROOT))
            for p, text in expected_skeletons().items()
            if not p.exists() or p.read_text() != text
        ]
        if drift:
            print("skeletons differ from what solutions/ generates (run `make skeletons`):\n  " + "\n  ".join(drift))
            return 1
        return 0
    refused = write_skeletons(out=args.out, force=args.force)
    if refused:
        print(
            "error: these files hold edits (a student's work?) and were left alone:\n  "
            + "\n  ".join(_shown(p, ROOT) for p in refused)
            + "\nTo write the skeletons elsewhere: make skeletons OUT=<folder>. To overwrite them, losing "
            "the edits: make skeletons FORCE=1",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
