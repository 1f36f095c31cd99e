"""Importing a student's modules by path, from exercises/, solutions/ or any copy laid out alike."""

import importlib.util
import sys
from pathlib import Path

from grader.core import MissingFunction


class ImportFailed(Exception):
    """The student's module could not be imported; the message says why and where."""


def load_module(path: Path):
    path = Path(path).resolve()
    if not path.is_file():
        raise ImportFailed(f"{path} does not exist")
    name = f"student_{path.parent.name}_{path.stem}_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # @triton.jit needs the module importable to read its source
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise ImportFailed(f"{path.parent.name}/{path.name} line {exc.lineno}: SyntaxError: {exc.msg}") from exc
    except Exception as exc:  # noqa: BLE001 - module-level student code may raise anything
        raise ImportFailed(f"importing {path.parent.name}/{path.name} raised {type(exc).__name__}: {exc}") from exc
    return module


def load_sibling(anchor: str, folder: str, module: str):
    """The module `folder/module.py` next to the exercise folder holding the file `anchor`.

    Exercise 07 uses it to reach the student's own exercises 04-06, wherever the course lives. In
    the notebooks (grader.notebooks) the sibling is `folder/folder.ipynb`: its code cells are loaded.
    """
    path = Path(anchor).resolve().parent.parent / folder / f"{module}.py"
    notebook = path.with_name(f"{folder}.ipynb")
    if not path.exists() and notebook.exists():
        from grader.notebooks import notebook_as_module

        path = notebook_as_module(notebook, module)
    return load_module(path)


class Implementation:
    """The student's functions for one exercise, as attributes: impl.matmul(a, b)."""

    def __init__(self, namespace: dict, where: str):
        self._namespace = namespace
        self._where = where

    def __getattr__(self, name):
        try:
            return self._namespace[name]
        except KeyError:
            raise MissingFunction(f"{self._where} does not define {name}()") from None


def load_implementation(exercise, target: Path) -> Implementation:
    path = Path(target) / exercise.folder / f"{exercise.module}.py"
    module = load_module(path)
    return Implementation(vars(module), f"{exercise.folder}/{exercise.module}.py")
