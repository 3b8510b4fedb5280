"""Every parser of a call is bounded (issue 49): no text a model writes makes ``find_call`` or the
arguments' parsing raise. Nesting 1,000 brackets deep used to raise RecursionError out of
``find_call`` (the learner died) and fail a whole ``ExecuteTools`` with UNKNOWN; now it is the call's
own ``bad_arguments`` error, and the other calls of the same request come back intact (through a real
calculator server on loopback)."""

from __future__ import annotations

import json

import pytest

from cohort.rpc.launch import ServiceProcess
from cohort.tools.base import MAX_JSON_DEPTH, ToolOutput, ToolSpec, json_depth, load_json, parse_arguments
from cohort.tools.calls import find_call
from cohort.tools.client import Call, ToolClient

DEEP = "[" * 1000 + "]" * 1000
HOSTILE = [
    DEEP, "[" * 1000, "{" * 1000, '{"a":' * 1000 + "1" + "}" * 1000, "[" * 100_000,
    "1" * 5000, '{"x": ' + "9" * 5000 + "}", '{"x": 1e999999}', "\x00", "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1),
]
SPEC = ToolSpec("calculator", "", {"type": "object", "properties": {"expression": {"type": "string"}},
                                   "required": ["expression"]})


@pytest.mark.parametrize("arguments", HOSTILE, ids=range(len(HOSTILE)))
def test_find_call_never_raises(arguments):
    for body in (arguments, f'{{"name": "python", "arguments": {arguments}}}'):
        text = f"I call <tool_call>{body}</tool_call> and go on"
        found = find_call(text, "tool_call")
        assert found is not None and text[found.end :] == " and go on"
        if found.call is None:
            assert "tool call is" in found.error
        else:  # a value it took is one it can write back
            assert json_depth(json.loads(found.call.arguments_json)) <= MAX_JSON_DEPTH


@pytest.mark.parametrize("arguments", HOSTILE, ids=range(len(HOSTILE)))
def test_parse_arguments_never_raises(arguments):
    out = parse_arguments(SPEC, arguments)
    assert isinstance(out, ToolOutput) and out.error_kind == "bad_arguments" and out.output.startswith("arguments ")


def test_the_depth_limit_is_exact_and_the_reason_says_it():
    at = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert load_json(at) == (json.loads(at), "")
    value, why = load_json(DEEP)
    assert value is None and f"deeper than {MAX_JSON_DEPTH} levels" in why
    assert json_depth({"a": [1, {"b": []}]}) == 4 and json_depth(7) == 0


def test_nesting_on_the_server_is_the_calls_error_and_the_bystander_is_intact():
    with ServiceProcess(["calculator"]) as proc:
        client = ToolClient([[proc.endpoint]], timeout_s=30)
        client.handshake()
        try:
            calls = [Call("calculator", json.dumps({"expression": "6 * 7"})),
                     Call("calculator", '{"expression": ' + DEEP + "}"),
                     Call("calculator", DEEP),
                     Call("calculator", json.dumps({"expression": "(" * 1000 + "1" + ")" * 1000})),
                     Call("calculator", json.dumps({"expression": "1 + 2"}))]
            results = client.execute(calls)
        finally:
            client.close()
    assert [r.ok for r in results] == [True] * 5, results  # nothing masked: the model wrote all of it
    assert results[0].output == "42" and results[4].output == "3" and not results[0].error_kind
    assert [r.error_kind for r in results[1:3]] == ["bad_arguments"] * 2
    assert all("deeper than" in r.output for r in results[1:3])
    assert results[3].error_kind == "bad_expression"
