"""How a tool call looks in generated text, and how its result goes back into the transcript.

Two formats (``rollout.tool_format``):

- ``tool_call`` (Qwen / Hermes chat templates): ``<tool_call>{"name": "python", "arguments": {"code":
  "print(1)"}}</tool_call>``; the result is written back as ``<tool_response>...</tool_response>``.
- ``fenced`` (models without a tool template, such as SmolLM2): a Markdown block opened with
  ````` ```python ````` (or ````` ```py `````) and closed with ````` ``` ````` is a call of the ``python`` tool; the
  result is written back as an ````` ```output ````` block.

The result is written inside the same assistant turn (as ReTool and open-instruct do), so it needs
no chat-template support; its tokens are context for the next turn and never part of the loss.
A call whose JSON does not parse is the model's error: :class:`Found` carries the message it reads.
:func:`find_call` never raises, whatever the text (the JSON is read by the bounded
:func:`cohort.tools.base.load_json`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

from cohort.tools.base import CallResult, load_json
from cohort.tools.client import Call

Format = Literal["tool_call", "fenced"]

_FENCED_OPEN = re.compile(r"```(?:python|py)[ \t]*\n")
# A call's end is found with str.find from the first opener, not with a lazy `(.*?)closer` regex: the regex
# tries every opener in turn and scans to the end of the text from each, quadratic in a text of many
# openers and no closer (256 KB of "<tool_call>" took 26 s). The first opener with a closer after it is
# the first opener, so the result is the same.


@dataclass(frozen=True)
class Found:
    end: int
    """Offset in the text just after the call (the turn is cut there: what follows was never read by a tool)."""
    call: Call | None
    """None when the call is malformed (``error`` says how)."""
    error: str = ""


def find_call(text: str, fmt: Format) -> Found | None:
    """The first complete call in ``text``, or None."""
    if fmt == "fenced":
        opener = _FENCED_OPEN.search(text)
        close = -1 if opener is None else text.find("```", opener.end())
        if close < 0:
            return None
        return Found(close + 3, Call("python", json.dumps({"code": text[opener.end() : close]})))
    start = text.find("<tool_call>")
    close = -1 if start < 0 else text.find("</tool_call>", start + len("<tool_call>"))
    if close < 0:
        return None
    end = close + len("</tool_call>")
    body, why = load_json(text[start + len("<tool_call>") : close])
    if why:  # bounded: nesting or numbers no parser here can take are the model's error too
        return Found(end, None, f"the tool call is {why}")
    if not isinstance(body, dict) or not isinstance(body.get("name"), str):
        return Found(end, None, 'a tool call is {"name": "<tool>", "arguments": {...}}')
    arguments = body.get("arguments", {})
    if isinstance(arguments, str):  # some templates write the arguments as a JSON string
        return Found(end, Call(body["name"], arguments))
    return Found(end, Call(body["name"], json.dumps(arguments)))


def render(result: CallResult, fmt: Format) -> str:
    """The text written into the transcript after a call: what the model reads next."""
    return "".join(render_parts(result, fmt))


def render_parts(result: CallResult, fmt: Format) -> tuple[str, str, str]:
    """:func:`render` in three parts: (the format's opening, the result's text, its closing). The opening and
    closing are the template's own markup; the middle is a program's output, to be encoded as plain text
    (``cohort.verifiers.base.encode_text``: a printed ``<|im_end|>`` never becomes the token)."""
    body = result.output.rstrip("\n")
    if result.truncated:
        body += "\n[output truncated]"
    if fmt == "fenced":
        return "\n```output\n", body, "\n```\n"
    return "\n<tool_response>\n", body, "\n</tool_response>\n"


def choose_format(fmt: str, chat_template: str | None) -> Format:
    if fmt != "auto":
        return fmt  # type: ignore[return-value]
    return "tool_call" if chat_template and "tool_call" in chat_template else "fenced"
