"""The messages between the grader and the process that runs student code.

A message is a JSON header and the raw bytes of the tensors it carries, on a pipe. Values are
plain data only: None, bool, int, float, str, lists, tuples, dicts with string keys, tensors, and
the grader's two markers (a fixture name, an output file name). Nothing is pickled, so decoding a
message can only ever produce plain data: a student's process cannot hand the grader an object
with behaviour of its own (a tensor subclass, a patched class), only numbers.

Both sides use this module; the grader decodes with limits (header size, dtypes, sizes), because
the other side is not trusted.
"""

import json
import math
import os
import select
import struct
import time
from typing import TypeGuard

import torch

MAX_HEADER = 1 << 20  # bytes of JSON in one message
MAX_PAYLOAD = 1 << 32  # bytes of tensor data in one message
DTYPES = {
    str(dt)[6:]: dt
    for dt in (
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.int8,
        torch.uint8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.bool,
    )
}
_LENGTHS = struct.Struct("<QQ")  # header bytes, payload bytes


class ProtocolError(Exception):
    """The other side sent something that is not a well-formed message."""


class Timeout(Exception):
    """The other side did not answer before the deadline."""


class Closed(Exception):
    """The other side closed the pipe (its process ended)."""


# ----------------------------------------------------------------------------- values
def encode(value, payloads: list):
    """A JSON-able tree for `value`; tensor bytes are appended to `payloads`."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, torch.Tensor):
        return _encode_tensor(value, payloads)
    if isinstance(value, (list, tuple)):
        return {"list" if isinstance(value, list) else "tuple": [encode(v, payloads) for v in value]}
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("dict keys must be strings")
        return {"dict": {k: encode(v, payloads) for k, v in value.items()}}
    marker = getattr(value, "wire_marker", None)
    if marker is not None:
        return marker(lambda v: encode(v, payloads))
    raise TypeError(f"a {type(value).__name__} cannot be passed between the grader and student code")


def _encode_tensor(t: torch.Tensor, payloads: list) -> dict:
    """The tensor's elements with its shape and strides, so a strided view arrives as a strided view."""
    t = t.detach()
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    if any(s < 0 for s in t.stride()):
        t = t.contiguous()
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) if t.numel() else 0
    flat = t.as_strided((span,), (1,)).cpu().contiguous()
    data = flat.view(torch.uint8).numpy().tobytes() if span else b""
    payloads.append(data)
    return {
        "tensor": {
            "dtype": str(t.dtype)[6:],
            "shape": list(t.shape),
            "stride": list(t.stride()),
            "device": t.device.type,
            "bytes": len(data),
        }
    }


def decode(tree, payloads: list, device=None, markers=None, margin=False):
    """The value encoded by `encode`. Tensors come back as plain torch.Tensor on `device` (or the
    device they were sent from); markers are resolved by `markers(kind, body, decode_nested)`.
    With `margin`, each floating-point tensor is followed in memory by a NaN margin, so a kernel
    that reads past the end of its input reads NaN (every time), not whatever happened to be there."""
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if not isinstance(tree, dict) or len(tree) != 1:
        raise ProtocolError(f"malformed value {str(tree)[:80]}")
    ((kind, body),) = tree.items()
    if kind == "float":
        if body not in ("nan", "inf", "-inf"):
            raise ProtocolError(f"malformed float {body!r}")
        return float(body)
    if kind in ("list", "tuple"):
        items = [decode(v, payloads, device, markers, margin) for v in _expect(body, list)]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        return {str(k): decode(v, payloads, device, markers, margin) for k, v in _expect(body, dict).items()}
    if kind == "tensor":
        return _decode_tensor(_expect(body, dict), payloads, device, margin)
    if markers is not None:
        return markers(kind, body, lambda tree: decode(tree, payloads, device, markers, margin))
    raise ProtocolError(f"unknown value kind {kind!r}")


def _expect(value, kind):
    if not isinstance(value, kind):
        raise ProtocolError(f"expected a {kind.__name__}, got {type(value).__name__}")
    return value


def _decode_tensor(spec: dict, payloads: list, device, margin: bool) -> torch.Tensor:
    dtype = DTYPES.get(spec.get("dtype", ""))
    shape, stride = spec.get("shape"), spec.get("stride")
    if dtype is None or not _ints(shape) or not _ints(stride) or len(shape) != len(stride) or len(shape) > 8:
        raise ProtocolError(f"malformed tensor {str(spec)[:120]}")
    if not payloads:
        raise ProtocolError("a tensor without data")
    data = payloads.pop(0)
    numel = math.prod(shape)
    span = 1 + sum((n - 1) * s for n, s in zip(shape, stride)) if numel else 0
    itemsize = torch.empty((), dtype=dtype).element_size()
    if len(data) != span * itemsize:
        raise ProtocolError(f"tensor data of {len(data)} bytes for {span} elements of {dtype}")
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype) if span else torch.empty(0, dtype=dtype)
    device = device or ("cuda" if spec.get("device") == "cuda" else "cpu")
    if margin and dtype.is_floating_point:
        buffer = torch.full((span + _margin(span),), math.nan, dtype=dtype, device=device)
    else:
        buffer = torch.empty(span, dtype=dtype, device=device)
    buffer[:span].copy_(flat)
    return buffer.as_strided(shape, stride)


def _margin(span: int) -> int:
    """Elements of NaN after an input: as many as the input (a block of rows read past the last row
    stays inside), at least 8192 and at most 2^24."""
    return min(max(span, 8192), 1 << 24)


def _ints(values) -> TypeGuard[list[int]]:
    return isinstance(values, list) and all(type(v) is int and 0 <= v < 1 << 40 for v in values)


# ----------------------------------------------------------------------------- framing
def send(fd: int, header: dict, payloads=()) -> None:
    body = json.dumps(header).encode()
    _write_all(fd, _LENGTHS.pack(len(body), sum(len(p) for p in payloads)) + body)
    for p in payloads:
        _write_all(fd, p)


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def receive(fd: int, deadline: float | None = None, sizes_of=None) -> tuple:
    """(header, payloads). `sizes_of(header)` lists the byte size of each payload."""
    header_len, payload_len = _LENGTHS.unpack(_read_exactly(fd, _LENGTHS.size, deadline))
    if header_len > MAX_HEADER or payload_len > MAX_PAYLOAD:
        raise ProtocolError(f"a message of {header_len} + {payload_len} bytes is over the limits")
    try:
        header = json.loads(_read_exactly(fd, header_len, deadline))
    except ValueError as exc:
        raise ProtocolError(f"a message header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ProtocolError("a message header is not a JSON object")
    sizes = sizes_of(header) if sizes_of else []
    if sum(sizes) != payload_len:
        raise ProtocolError(f"payload of {payload_len} bytes does not match its tensors ({sum(sizes)} bytes)")
    return header, [_read_exactly(fd, n, deadline) for n in sizes]


def tensor_sizes(tree) -> list:
    """The byte sizes of the tensors in an encoded value, in encoding order."""
    sizes = []

    def walk(node, depth=0):
        if depth > 64:
            raise ProtocolError("a value nested more than 64 levels deep")
        if isinstance(node, dict):
            if len(node) == 1 and "tensor" in node and isinstance(node["tensor"], dict):
                n = node["tensor"].get("bytes")
                if type(n) is not int or n < 0:
                    raise ProtocolError("malformed tensor size")
                sizes.append(n)
                return
            for v in node.values():
                walk(v, depth + 1)
        elif isinstance(node, list):
            for v in node:
                walk(v, depth + 1)

    walk(tree)
    return sizes


def _read_exactly(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, left = [], n
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise Timeout()
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise Closed()
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
