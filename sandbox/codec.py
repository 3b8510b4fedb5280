"""Plain-data codec between the trusted side and a sandboxed candidate.

Values cross the sandbox boundary only as *plain data*: ``None``, ``bool``, ``int``, ``float``,
``complex``, ``str``, ``bytes``, ``list``, ``tuple``, ``set``, ``frozenset`` and ``dict``. The
decoder builds fresh builtin objects from a tagged JSON tree, so whatever the candidate sends, the
grader compares real ints and lists: an object whose ``__eq__`` always returns True cannot cross.

This module is stdlib-only on purpose: its source is also loaded inside the sandbox
(see ``sandbox/_zygote.py``).

>>> decode(encode([1, (2.5, "x"), {b"k": {3}}]))
[1, (2.5, 'x'), {b'k': {3}}]
"""

from __future__ import annotations

import base64
import json

MAX_DEPTH = 64
FRAME_HEADER = 4


class CodecError(ValueError):
    """A value that cannot cross the boundary, or a malformed message."""


def _enc(value, depth):
    if depth > MAX_DEPTH:
        raise CodecError("value nested too deeply")
    if value is None or value is True or value is False:
        return value
    if isinstance(value, int):
        return {"i": str(int.__index__(value))}
    if isinstance(value, float):
        return {"f": float.__repr__(float(value))}
    if isinstance(value, complex):
        return {"c": [float.__repr__(value.real), float.__repr__(value.imag)]}
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, (bytes, bytearray)):
        return {"b": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, list):
        return [_enc(v, depth + 1) for v in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"t": [_enc(v, depth + 1) for v in tuple.__iter__(value)]}
    if isinstance(value, frozenset):
        return {"z": [_enc(v, depth + 1) for v in value]}
    if isinstance(value, set):
        return {"s": [_enc(v, depth + 1) for v in value]}
    if isinstance(value, dict):
        return {"d": [[_enc(k, depth + 1), _enc(v, depth + 1)] for k, v in dict.items(value)]}
    raise CodecError(f"cannot pass a value of type {type(value).__name__} across the sandbox boundary")


def encode(value):
    """Plain value -> JSON-able tagged tree (raises CodecError for anything else)."""
    return _enc(value, 0)


def _float(text):
    if type(text) is not str or len(text) > 40:
        raise CodecError("bad float")
    try:
        return float(text)
    except ValueError:
        raise CodecError("bad float") from None


def _dec(node, depth):
    if depth > MAX_DEPTH:
        raise CodecError("value nested too deeply")
    kind = type(node)
    if node is None or kind is bool or kind is str:
        return node
    if kind is list:
        return [_dec(v, depth + 1) for v in node]
    if kind is not dict or len(node) != 1:
        raise CodecError(f"malformed value node of type {kind.__name__}")
    ((tag, body),) = node.items()
    if tag == "i":
        if type(body) is not str or len(body) > 5000:
            raise CodecError("bad int")
        try:
            return int(body)
        except ValueError:
            raise CodecError("bad int") from None
    if tag == "f":
        return _float(body)
    if tag == "c":
        if type(body) is not list or len(body) != 2:
            raise CodecError("bad complex")
        return complex(_float(body[0]), _float(body[1]))
    if tag == "b":
        if type(body) is not str:
            raise CodecError("bad bytes")
        try:
            return base64.b64decode(body, validate=True)
        except ValueError:
            raise CodecError("bad bytes") from None
    if type(body) is not list:
        raise CodecError(f"bad container {tag!r}")
    try:
        if tag == "t":
            return tuple(_dec(v, depth + 1) for v in body)
        if tag == "s":
            return {_dec(v, depth + 1) for v in body}
        if tag == "z":
            return frozenset(_dec(v, depth + 1) for v in body)
        if tag == "d":
            out = {}
            for pair in body:
                if type(pair) is not list or len(pair) != 2:
                    raise CodecError("bad dict item")
                out[_dec(pair[0], depth + 1)] = _dec(pair[1], depth + 1)
            return out
    except TypeError as exc:  # unhashable key or set member
        raise CodecError(str(exc)) from None
    raise CodecError(f"unknown tag {tag!r}")


def decode(tree):
    """Tagged tree -> fresh builtin objects; rejects anything malformed."""
    return _dec(tree, 0)


def valid_text(text) -> str:
    """``text`` as a string that encodes to UTF-8 (lone surrogates become '?'); protobuf and
    gRPC refuse anything else, so a message built from untrusted text must pass through here."""
    return str(text).encode("utf-8", "replace").decode("utf-8")


def pack(message: dict) -> bytes:
    """One length-prefixed JSON frame."""
    body = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
    return len(body).to_bytes(FRAME_HEADER, "big") + body


def unpack(body: bytes) -> dict:
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        raise CodecError("frame is not JSON") from None
    if type(message) is not dict:
        raise CodecError("frame is not an object")
    return message
