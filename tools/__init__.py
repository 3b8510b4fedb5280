"""Tools a policy calls mid-rollout, behind the ``grpo.tool.v1`` contract (``proto/grpo/tool/v1``).

- :mod:`cohort.tools.base`: what a tool is (a name, a JSON-Schema of its arguments, limits, and
  ``run(arguments) -> ToolOutput``) and who is to blame for a failure: the call's content (an OK
  result the model reads) or the infrastructure (:class:`~cohort.tools.base.ToolUnavailable`: masked).
- :mod:`cohort.tools.server`: hosts tools as a ``ToolService`` (health, reflection, drain).
- :mod:`cohort.tools.calculator`: a small tool written against the contract alone (no sandbox).
- :mod:`cohort.tools.client`: the learner's blocking client (the one failover loop of ``cohort.rpc.retry``).
- :mod:`cohort.tools.calls`: how a call looks in generated text (``<tool_call>`` JSON, or a fenced
  ``python`` block) and how its result is written back into the transcript.

The ``python`` tool is served by the sandbox service (``cohort.sandbox.tool``), with its isolation.
"""
