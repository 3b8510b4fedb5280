"""Conversion between ``grpo.verifier.v1`` messages and the domain types of ``verifiers.base``.

Only this module, the server, the client and the scoring processes import the generated stubs.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice

from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb

from cohort.verifiers.base import (
    CodeTests,
    GroupRequest,
    GroupResult,
    IoCase,
    Reference,
    Rollout,
    RolloutResult,
    RolloutStatus,
    StepReward,
    Verdict,
)

_STATUS_TO_PB = {
    RolloutStatus.OK: pb.ROLLOUT_STATUS_OK,
    RolloutStatus.INVALID_REFERENCE: pb.ROLLOUT_STATUS_INVALID_REFERENCE,
    RolloutStatus.VERIFIER_TIMEOUT: pb.ROLLOUT_STATUS_VERIFIER_TIMEOUT,
    RolloutStatus.VERIFIER_ERROR: pb.ROLLOUT_STATUS_VERIFIER_ERROR,
    RolloutStatus.DEPENDENCY_UNAVAILABLE: pb.ROLLOUT_STATUS_DEPENDENCY_UNAVAILABLE,
}
_STATUS_FROM_PB = {v: k for k, v in _STATUS_TO_PB.items()}

_VERDICT_TO_PB = {
    Verdict.UNSPECIFIED: pb.VERDICT_UNSPECIFIED,
    Verdict.CORRECT: pb.VERDICT_CORRECT,
    Verdict.INCORRECT: pb.VERDICT_INCORRECT,
    Verdict.NO_ANSWER: pb.VERDICT_NO_ANSWER,
    Verdict.PARTIAL: pb.VERDICT_PARTIAL,
    Verdict.RESOURCE_LIMIT_EXCEEDED: pb.VERDICT_RESOURCE_LIMIT_EXCEEDED,
    Verdict.RUNTIME_ERROR: pb.VERDICT_RUNTIME_ERROR,
}
_VERDICT_FROM_PB = {v: k for k, v in _VERDICT_TO_PB.items()}

_COMPARISON_TO_PB = {"exact": pb.OUTPUT_COMPARISON_EXACT, "whitespace": pb.OUTPUT_COMPARISON_WHITESPACE}


class MalformedMessage(ValueError):
    """A message that cannot be turned into domain types (maps to INVALID_ARGUMENT)."""


# ---- requests ---------------------------------------------------------------------------------


def code_tests_from_pb(msg: pb.CodeTests) -> CodeTests:
    kind = msg.WhichOneof("kind")
    if kind == "asserts":
        return CodeTests("asserts", asserts=tuple(msg.asserts.asserts), setup_code=msg.asserts.setup_code)
    if kind == "function":
        return CodeTests("function", test_code=msg.function.test_code, entry_point=msg.function.entry_point)
    if kind == "io":
        comparison = "exact" if msg.io.comparison == pb.OUTPUT_COMPARISON_EXACT else "whitespace"
        cases = tuple(IoCase(c.stdin, c.expected_stdout) for c in msg.io.cases)
        return CodeTests("io", io_cases=cases, comparison=comparison)
    raise MalformedMessage("reference.code_tests has none of asserts / function / io set")


def code_tests_to_pb(tests: CodeTests) -> pb.CodeTests:
    if tests.kind == "asserts":
        return pb.CodeTests(asserts=pb.AssertTests(asserts=list(tests.asserts), setup_code=tests.setup_code))
    if tests.kind == "function":
        return pb.CodeTests(function=pb.FunctionTests(test_code=tests.test_code, entry_point=tests.entry_point))
    cases = [pb.IoCase(stdin=c.stdin, expected_stdout=c.expected_stdout) for c in tests.io_cases]
    return pb.CodeTests(io=pb.IoTests(cases=cases, comparison=_COMPARISON_TO_PB[tests.comparison]))


def group_from_pb(msg: pb.VerifyGroupRequest) -> GroupRequest:
    kind = msg.reference.WhichOneof("kind") if msg.HasField("reference") else None
    if kind == "answer":
        reference = Reference(answer=msg.reference.answer)
    elif kind == "code_tests":
        reference = Reference(code_tests=code_tests_from_pb(msg.reference.code_tests))
    else:
        reference = Reference()
    timeout = msg.rollout_timeout.ToTimedelta().total_seconds() if msg.HasField("rollout_timeout") else None
    if timeout is not None and timeout <= 0:
        raise MalformedMessage(f"group {msg.group_id!r}: rollout_timeout must be positive, got {timeout}s")
    options = msg.options
    return GroupRequest(
        msg.verifier,
        tuple([Rollout(r.index, r.completion, r.truncated) for r in msg.rollouts]),
        reference,
        msg.group_id,
        msg.prompt,
        timeout,
        {k: options[k] for k in options} if options else {},
    )


def group_to_pb(group: GroupRequest) -> pb.VerifyGroupRequest:
    msg = pb.VerifyGroupRequest()
    _fill_group(msg, group)
    return msg


def batch_to_pb(groups: Sequence[GroupRequest]) -> pb.BatchVerifyGroupsRequest:
    # Messages are filled in place through ``add()``: 3x faster on upb than building each one with
    # keyword arguments and copying it into its parent.
    batch = pb.BatchVerifyGroupsRequest()
    add = batch.requests.add
    for group in groups:
        _fill_group(add(), group)
    return batch


def _fill_group(msg: pb.VerifyGroupRequest, group: GroupRequest) -> None:
    msg.group_id = group.group_id
    msg.verifier = group.verifier
    if group.prompt:
        msg.prompt = group.prompt
    add = msg.rollouts.add
    for r in group.rollouts:
        if r.truncated:
            add(index=r.index, completion=r.completion, truncated=True)
        else:
            add(index=r.index, completion=r.completion)
    if group.options:
        msg.options.update(group.options)
    if group.reference.code_tests is not None:
        msg.reference.code_tests.CopyFrom(code_tests_to_pb(group.reference.code_tests))
    elif group.reference.answer is not None:
        msg.reference.answer = group.reference.answer
    if group.rollout_timeout_s is not None:
        msg.rollout_timeout.FromNanoseconds(int(group.rollout_timeout_s * 1e9))


# ---- results ----------------------------------------------------------------------------------


def _nanos(seconds: float) -> int:
    """What :func:`_set_duration` writes, as one integer."""
    whole = int(seconds)
    return whole * 1_000_000_000 + int((seconds - whole) * 1e9)


def _set_duration(duration, seconds: float) -> None:
    whole = int(seconds)  # set in place: cheaper than building a Duration message
    if whole:
        duration.seconds = whole
    duration.nanos = int((seconds - whole) * 1e9)


def _fill_result(msg: pb.RolloutResult, result: RolloutResult) -> None:
    if result.duration_s:  # timed alone by its verifier; otherwise the group's duration covers it
        _set_duration(msg.verify_duration, result.duration_s)
    if result.components:
        components = msg.reward_components
        for key, value in result.components.items():  # item by item: 2x faster than update() on upb maps
            components[key] = value
    if result.flags:
        msg.flags.extend(result.flags)
    if result.steps:
        add = msg.steps.add
        for step in result.steps:
            add(end=step.end, reward=step.reward)


def result_to_pb(result: RolloutResult) -> pb.RolloutResult:
    msg = pb.RolloutResult(
        index=result.index, status=_STATUS_TO_PB[result.status], verdict=_VERDICT_TO_PB[result.verdict],
        reward=result.reward, detail=result.detail,
    )
    _fill_result(msg, result)
    return msg


def group_result_to_pb(result: GroupResult) -> pb.VerifyGroupResponse:
    msg = pb.VerifyGroupResponse()
    _fill_group_result(msg, result)
    return msg


def batch_result_to_pb(results: Sequence[GroupResult], columns: bool = False, first_group: int = 0) -> pb.BatchVerifyGroupsResponse:
    """The groups' results as rows (each response's ``results``), or with ``columns`` as one
    ``ResultColumns`` for the whole batch (``columns`` and each response's ``column_rows``).

    ``first_group``: the position of ``results[0]`` in the whole batch, when this is the reply to a
    chunk of it (the scoring processes): the rows' ``group`` tags count from there.
    """
    batch = pb.BatchVerifyGroupsResponse()
    add = batch.responses.add
    for result in results:
        msg = add()
        _fill_group_result(msg, result, rows=not columns)
        if columns:
            msg.column_rows = len(result.results)
    if columns:
        _fill_columns(batch.columns, results, first_group)
    return batch


def _fill_group_result(msg: pb.VerifyGroupResponse, result: GroupResult, rows: bool = True) -> None:
    msg.group_id = result.group_id
    msg.verifier = result.verifier
    msg.verifier_version = result.verifier_version
    if result.duration_s:
        _set_duration(msg.verify_duration, result.duration_s)
    if not rows:
        return
    add = msg.results.add
    status, verdict = _STATUS_TO_PB, _VERDICT_TO_PB
    for r in result.results:
        rmsg = add(index=r.index, status=status[r.status], verdict=verdict[r.verdict], reward=r.reward, detail=r.detail)
        _fill_result(rmsg, r)


def _fill_columns(msg: pb.ResultColumns, groups: Sequence[GroupResult], first_group: int) -> None:
    """Results as ``ResultColumns``: a dozen bulk ``extend`` calls instead of a message per rollout."""
    results = [r for g in groups for r in g.results]
    msg.group.extend([first_group + k for k, g in enumerate(groups) for _ in g.results])
    status, verdict = _STATUS_TO_PB, _VERDICT_TO_PB
    msg.index.extend([r.index for r in results])
    msg.status.extend([status[r.status] for r in results])
    msg.verdict.extend([verdict[r.verdict] for r in results])
    msg.reward.extend([r.reward for r in results])
    msg.detail.extend([r.detail for r in results])
    msg.verify_nanos.extend([_nanos(r.duration_s) if r.duration_s else 0 for r in results])
    components = [r.components for r in results]
    msg.component_counts.extend([len(c) for c in components])
    msg.component_names.extend([k for c in components for k in c])
    msg.component_values.extend([v for c in components for v in c.values()])
    flags = [r.flags for r in results]
    msg.flag_counts.extend([len(f) for f in flags])
    msg.flags.extend([f for fs in flags for f in fs])
    steps = [r.steps for r in results]
    # counts always (a byte a row), so that chunk replies joined as bytes line up whichever chunks have steps
    msg.step_counts.extend([len(s) for s in steps])
    if any(steps):
        msg.step_ends.extend([x.end for s in steps for x in s])
        msg.step_rewards.extend([x.reward for s in steps for x in s])


def _results_from_columns(msg: pb.ResultColumns, shares: Sequence[float]) -> list[RolloutResult]:
    """The inverse of :func:`_fill_columns`; ``shares[k]`` is row k's duration unless it was timed alone.

    Raises MalformedMessage when the columns do not line up (a buggy server): nothing is guessed.
    """
    index = list(msg.index)
    n = len(index)
    status, verdict, reward, detail = list(msg.status), list(msg.verdict), list(msg.reward), list(msg.detail)
    # the arithmetic of a Duration's seconds + nanos, so that columns decode to exactly what rows do
    seconds = [t // 1_000_000_000 + t % 1_000_000_000 * 1e-9 if t else share for t, share in zip(msg.verify_nanos, shares)]
    counts, names, values = list(msg.component_counts), list(msg.component_names), list(msg.component_values)
    flag_counts, flag_names = list(msg.flag_counts), list(msg.flags)
    lengths = {"status": len(status), "verdict": len(verdict), "reward": len(reward), "detail": len(detail),
               "verify_nanos": len(msg.verify_nanos), "component_counts": len(counts), "flag_counts": len(flag_counts),
               "rows of the responses": len(shares)}
    if any(k != n for k in lengths.values()):
        raise MalformedMessage(f"result columns do not line up: {n} indexes, " + ", ".join(f"{v} {k}" for k, v in lengths.items()))
    if not sum(counts) == len(names) == len(values):
        raise MalformedMessage(f"component_counts sum to {sum(counts)} for {len(names)} names and {len(values)} values")
    if sum(flag_counts) != len(flag_names):
        raise MalformedMessage(f"flag_counts sum to {sum(flag_counts)} for {len(flag_names)} flags")
    steps = _steps_from_columns(msg, n)
    k = counts[0] if counts else 0
    # the usual case: every row has the same names in the same order (counts checked first: then the
    # comparison list is exactly as long as `names`)
    if k and counts.count(k) == n and names == names[:k] * n:
        first = names[:k]
        components = [dict(zip(first, row)) for row in zip(*[iter(values)] * k)]
    else:
        name_it, value_it = iter(names), iter(values)
        components = [dict(zip(islice(name_it, c), islice(value_it, c))) if c else {} for c in counts]
    flag_it = iter(flag_names)
    flags = [tuple(islice(flag_it, c)) if c else () for c in flag_counts] if flag_names else [()] * n
    statuses, verdicts, unspecified = _STATUS_FROM_PB, _VERDICT_FROM_PB, Verdict.UNSPECIFIED
    rows = zip(index, status, verdict, reward, components, detail, seconds, flags, steps)
    if statuses.keys() >= set(status):
        return [RolloutResult(i, statuses[s], verdicts.get(v, unspecified), w, c, d, t, f, p) for i, s, v, w, c, d, t, f, p in rows]
    return [  # UNSPECIFIED or a value from a newer server: not a usable verdict
        RolloutResult(i, statuses[s], verdicts.get(v, unspecified), w, c, d, t, f, p) if s in statuses
        else RolloutResult.unusable(i, RolloutStatus.VERIFIER_ERROR, f"server sent status {s}")
        for i, s, v, w, c, d, t, f, p in rows
    ]


def _steps_from_columns(msg: pb.ResultColumns, n: int) -> list[tuple[StepReward, ...]]:
    """Each row's step rewards; all rows empty when the server sent no step columns (it predates them)."""
    counts, ends, rewards = list(msg.step_counts), list(msg.step_ends), list(msg.step_rewards)
    if not counts and not ends and not rewards:
        return [()] * n
    if len(counts) != n:
        raise MalformedMessage(f"result columns do not line up: {n} indexes, {len(counts)} step_counts")
    if not sum(counts) == len(ends) == len(rewards):
        raise MalformedMessage(f"step_counts sum to {sum(counts)} for {len(ends)} ends and {len(rewards)} rewards")
    pairs = iter(list(map(StepReward, ends, rewards)))
    return [tuple(islice(pairs, c)) if c else () for c in counts]


def batch_result_from_pb(msg: pb.BatchVerifyGroupsResponse) -> list[GroupResult]:
    """Every group's results, whichever layout the server used; MalformedMessage when they do not line up."""
    if not msg.HasField("columns"):
        return [group_result_from_pb(r) for r in msg.responses]
    responses = msg.responses
    sizes = [r.column_rows for r in responses]
    if sum(sizes) != len(msg.columns.index):  # checked before anything is sized by a number the server sent
        raise MalformedMessage(f"the responses claim {sum(sizes)} column rows; the columns have {len(msg.columns.index)}")
    group_s = [_group_seconds(r) for r in responses]
    shares: list[float] = []
    for r, size, seconds in zip(responses, sizes, group_s):
        if r.results:
            raise MalformedMessage(f"group {r.group_id!r} has rows although the batch came as columns")
        shares += [seconds / max(1, size)] * size
    if list(msg.columns.group) != [k for k, size in enumerate(sizes) for _ in range(size)]:
        raise MalformedMessage("the column rows are not in the order of the responses (by their group tags)")
    flat = _results_from_columns(msg.columns, shares)
    out, start = [], 0
    for r, size, seconds in zip(responses, sizes, group_s):
        rows = tuple(flat[start : start + size])
        start += size
        out.append(GroupResult(r.group_id, r.verifier, r.verifier_version, rows, seconds or sum(x.duration_s for x in rows)))
    return out


def _group_seconds(msg: pb.VerifyGroupResponse) -> float:
    if msg.HasField("verify_duration"):
        d = msg.verify_duration
        return d.seconds + d.nanos * 1e-9
    return 0.0


def group_result_from_pb(msg: pb.VerifyGroupResponse) -> GroupResult:
    """A result the server did not time alone gets its share of the group's time as ``duration_s``."""
    group_s = _group_seconds(msg)
    # One loop with everything bound locally: the client decodes every result of every batch.
    statuses, verdicts, unspecified = _STATUS_FROM_PB, _VERDICT_FROM_PB, Verdict.UNSPECIFIED
    results = []
    total = 0.0
    share = group_s / max(1, len(msg.results))
    for r in msg.results:
        status = statuses.get(r.status)
        if status is None:  # UNSPECIFIED or a value from a newer server: not a usable verdict
            results.append(RolloutResult.unusable(r.index, RolloutStatus.VERIFIER_ERROR, f"server sent status {r.status}"))
            continue
        if r.HasField("verify_duration"):
            d = r.verify_duration
            seconds = d.seconds + d.nanos * 1e-9
        else:
            seconds = share
        total += seconds
        rc = r.reward_components
        flags = r.flags
        steps = r.steps
        results.append(RolloutResult(
            r.index,
            status,
            verdicts.get(r.verdict, unspecified),
            r.reward,
            {k: rc[k] for k in rc} if rc else {},  # faster than dict() on upb maps
            r.detail,
            seconds,
            tuple(flags) if flags else (),
            tuple([StepReward(x.end, x.reward) for x in steps]) if steps else (),
        ))
    return GroupResult(msg.group_id, msg.verifier, msg.verifier_version, tuple(results), group_s or total)


status_name = {s: pb.RolloutStatus.Name(v) for s, v in _STATUS_TO_PB.items()}
verdict_name = {v: pb.Verdict.Name(p) for v, p in _VERDICT_TO_PB.items()}
