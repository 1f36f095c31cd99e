"""The messages between the grader and the student's process carry plain data, and nothing else."""

import pytest
import torch

from common import wire


def _round_trip(value, **options):
    payloads = []
    tree = wire.encode(value, payloads)
    return wire.decode(tree, payloads, **options)


def test_a_strided_view_arrives_as_the_same_view():
    x = torch.randn(6, 4).t()
    y = _round_trip({"x": [x, 3, "a"]})
    assert y["x"][1:] == [3, "a"]
    assert y["x"][0].stride() == x.stride() and torch.equal(y["x"][0], x)


def test_inputs_read_past_their_end_read_nan():
    x = torch.randn(5, 3)
    y = _round_trip(x, margin=True)
    assert torch.equal(y, x)
    past_the_end = y.as_strided((8192,), (1,), y.storage_offset() + x.numel())
    assert past_the_end.isnan().all()
    assert _round_trip(torch.arange(4), margin=True).untyped_storage().nbytes() == 4 * 8  # integers: no margin


def test_a_tensor_subclass_arrives_as_a_plain_tensor():
    class Liar(torch.Tensor):
        pass

    y = _round_trip(torch.ones(3).as_subclass(Liar))
    assert type(y) is torch.Tensor


@pytest.mark.parametrize(
    "tree",
    [
        {"tensor": {"dtype": "object", "shape": [1], "stride": [1]}},
        {"float": "1e999"},
        {"pickle": "..."},
        ["not", "a", "value"],
    ],
)
def test_malformed_values_are_refused(tree):
    with pytest.raises(wire.ProtocolError):
        wire.decode(tree, [b"\0" * 8])
