"""How calls are found in generated text and written back (cohort.tools.calls): both formats."""

from __future__ import annotations

import json

from cohort.tools.base import CallResult
from cohort.tools.calls import choose_format, find_call, render


def test_tool_call_json_is_found_and_cut_after_its_closing_tag() -> None:
    text = 'Let me compute.<tool_call>\n{"name": "python", "arguments": {"code": "print(2)"}}\n</tool_call>ignored'
    found = find_call(text, "tool_call")
    assert text[: found.end].endswith("</tool_call>") and text[found.end :] == "ignored"
    assert found.call.name == "python" and json.loads(found.call.arguments_json) == {"code": "print(2)"}


def test_arguments_given_as_a_json_string_pass_through() -> None:
    found = find_call('<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": \\"1+2\\"}"}</tool_call>',
                      "tool_call")
    assert found.call.arguments_json == '{"expression": "1+2"}'


def test_a_malformed_call_is_the_models_error_to_read() -> None:
    found = find_call("<tool_call>{name: python}</tool_call> and more", "tool_call")
    assert found.call is None and "not valid JSON" in found.error and found.end == len("<tool_call>{name: python}</tool_call>")
    assert find_call('<tool_call>["python"]</tool_call>', "tool_call").call is None


def test_an_unclosed_call_is_no_call_yet() -> None:
    assert find_call('<tool_call>{"name": "python"', "tool_call") is None
    assert find_call("```python\nprint(1)\n", "fenced") is None
    assert find_call("just an answer: 42", "fenced") is None


def test_fenced_blocks_run_in_the_python_tool() -> None:
    for opener in ("```python\n", "```py\n", "```python  \n"):
        found = find_call(f"Sure.\n{opener}x = 6 * 7\nprint(x)\n```\nThe answer", "fenced")
        assert found.call.name == "python" and json.loads(found.call.arguments_json) == {"code": "x = 6 * 7\nprint(x)\n"}
    assert find_call("```\nprint(1)\n```", "fenced") is None  # an unlabelled block is not a call


def test_results_are_written_back_in_the_calls_format() -> None:
    assert render(CallResult(True, "42\n"), "fenced") == "\n```output\n42\n```\n"
    assert render(CallResult(True, "42"), "tool_call") == "\n<tool_response>\n42\n</tool_response>\n"
    assert "[output truncated]" in render(CallResult(True, "zzz", truncated=True), "fenced")


def test_auto_picks_tool_call_only_when_the_template_knows_it() -> None:
    assert choose_format("auto", "{% for tool_call in message.tool_calls %}<tool_call>") == "tool_call"
    assert choose_format("auto", "<|im_start|>{{ message.content }}") == "fenced"
    assert choose_format("auto", None) == "fenced" and choose_format("tool_call", None) == "tool_call"
