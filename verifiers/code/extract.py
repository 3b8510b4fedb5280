"""Code extraction from a completion: the last fenced python block, or the whole text.

>>> extract_code("Here:\\n```python\\nprint(1)\\n```\\nand\\n```py\\nprint(2)\\n```")
'print(2)\\n'
>>> extract_code("def f():\\n    return 1")
'def f():\\n    return 1'
"""

from __future__ import annotations

import re

FENCE_RE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.MULTILINE | re.DOTALL)
OPEN_RE = re.compile(r"^[ \t]*```[ \t]*(python3?|py)?[ \t]*\n", re.MULTILINE | re.IGNORECASE)
PYTHON_TAGS = {"python", "python3", "py", ""}


def extract_code(completion: str) -> str:
    """The last ```python (or untagged) block; an unclosed final block counts; else the whole text."""
    blocks = [m.group(2) for m in FENCE_RE.finditer(completion) if m.group(1).lower() in PYTHON_TAGS]
    last_close = max((m.end() for m in FENCE_RE.finditer(completion)), default=0)
    tail = OPEN_RE.search(completion, last_close)
    if tail is not None:  # truncated completion: an opening fence that never closed
        return completion[tail.end():]
    if blocks:
        return blocks[-1]
    return completion
