"""Generate the student skeletons (exercises/) from the instructor solutions (solutions/).

Each region between `### BEGIN SOLUTION` and `### END SOLUTION` becomes a stub that fails with
"not implemented yet": inside a @triton.jit function a tl.static_assert (a `raise` does not compile
for a GPU), elsewhere a NotImplementedError. `python -m grader.skeletons --check` reports drift.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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


def main(argv) -> int:
    drift = []
    for path, text in expected_skeletons().items():
        if "--check" in argv:
            if not path.exists() or path.read_text() != text:
                drift.append(str(path.relative_to(ROOT)))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if drift:
        print("skeletons differ from what solutions/ generates (run `make skeletons`):\n  " + "\n  ".join(drift))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
