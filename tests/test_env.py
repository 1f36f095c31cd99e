"""The environment checks: the interpreter is on without a GPU, and broken pairs are explained."""

import os

import pytest

from common import env
from tests.conftest import MODE


def test_interpreter_is_on_without_a_gpu():
    if MODE.gpu:
        pytest.skip("this machine has a CUDA GPU: the interpreter stays off")
    assert os.environ["TRITON_INTERPRET"] == "1" and "interpreter" in MODE.description


def test_working_interpreter_passes_the_probe():
    if MODE.gpu:
        pytest.skip("the probe is for the interpreter")
    env.check_interpreter()


def test_known_broken_pair_is_explained(monkeypatch):
    def numpy_2_4_failure():
        raise TypeError("only 0-dimensional arrays can be converted to Python scalars")

    monkeypatch.setattr(env, "_loop_probe", numpy_2_4_failure)
    with pytest.raises(env.BrokenEnvironment, match=r"numpy >= 2\.4.*pip install 'numpy<2\.4'"):
        env.check_interpreter()


def test_wrong_result_is_reported(monkeypatch):
    monkeypatch.setattr(env, "_loop_probe", lambda: [0.0] * 16)
    with pytest.raises(env.BrokenEnvironment, match="wrong sum"):
        env.check_interpreter()
