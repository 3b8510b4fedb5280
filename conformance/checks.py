"""The rules of the conformance kit: one small function per rule, in one registry.

A check takes the :class:`Target` and returns a one-line summary when the rule holds; it raises
:class:`CheckFailed` (the rule is broken) or :class:`CheckSkipped`. Checks run in registry order:
cheap read-only rules first, the rules that load or stop the server last.

Over 400 lines on purpose: the registry of rules, one small function each, in the order they run;
splitting by topic would split the order.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb

from cohort.conformance.cases import REWARD_TOLERANCE
from cohort.rpc import health
from cohort.conformance.target import (
    CheckFailed,
    CheckSkipped,
    DefaultDeadline,
    Target,
    call,
    describe,
    outcome,
    wait_futures,
)

SERVICE = pb.DESCRIPTOR.services_by_name["VerifierService"]
LIMIT_CAP = 100_000  # don't build requests above this many groups/rollouts to probe a limit
MESSAGE_CAP = 64 * 1024 * 1024  # nor messages above this size


@dataclass(frozen=True)
class Rule:
    name: str
    summary: str
    check: Callable[[Target], str]


RULES: dict[str, Rule] = {}


def rule(name: str, summary: str) -> Callable[[Callable[[Target], str]], Callable[[Target], str]]:
    def register(fn: Callable[[Target], str]) -> Callable[[Target], str]:
        if name in RULES:
            raise ValueError(f"conformance rule {name!r} registered twice")
        RULES[name] = Rule(name, summary, fn)
        return fn

    return register


# ---- service surface -------------------------------------------------------------------------


@rule("health", "grpc.health.v1 answers SERVING, overall and for the verifier")
def check_health(t: Target) -> str:
    stub = t.guarded(health.stub(t.channel))
    for service in ("", t.verifier):
        label = repr(service) if service else "overall"
        try:
            status = health.status(stub, service, t.options.call_timeout_s)
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.UNIMPLEMENTED:
                raise CheckFailed("no grpc.health.v1.Health service (Kubernetes probes and `cohort health` need it)") from None
            raise CheckFailed(f"health {label}: {exc.code().name}: {exc.details()}") from None
        if status != health.SERVING:
            raise CheckFailed(f"health {label} is {status}, expected SERVING")
    return f"overall and {t.verifier!r} SERVING"


@rule("reflection", "server reflection lists VerifierService and resolves its methods")
def check_reflection(t: Target) -> str:
    # the database sets no deadline of its own: a server that never answers must not hold the kit
    db = ProtoReflectionDescriptorDatabase(grpc.intercept_channel(t.channel, DefaultDeadline(t.options.first_call_timeout_s)))
    try:
        services = list(db.get_services())
        if SERVICE.full_name not in services:
            raise CheckFailed(f"reflection lists {services}, not {SERVICE.full_name}")
        file = db.FindFileContainingSymbol(SERVICE.full_name)
    except grpc.RpcError as exc:
        if exc.code() is grpc.StatusCode.UNIMPLEMENTED:
            raise CheckFailed("no server reflection service (grpcurl and debugging need it)") from None
        raise CheckFailed(f"reflection: {exc.code().name}: {exc.details()}") from None
    except KeyError as exc:
        raise CheckFailed(f"reflection lists {SERVICE.full_name} but has no file for it: {exc}") from None
    # Read the method signatures from the reflected FileDescriptorProto (not a built pool: some
    # runtimes, e.g. @grpc/reflection, leave well-known-type imports out of the file they serve).
    found = [s for s in file.service if f"{file.package}.{s.name}".lstrip(".") == SERVICE.full_name]
    if not found:
        raise CheckFailed(f"reflection's file {file.name!r} for {SERVICE.full_name} does not define it")
    want = {m.name: (m.input_type.full_name, m.output_type.full_name) for m in SERVICE.methods}
    have = {m.name: (m.input_type.lstrip("."), m.output_type.lstrip(".")) for m in found[0].method}
    missing = sorted(n for n in want if have.get(n) != want[n])
    if missing:
        raise CheckFailed(f"reflected {SERVICE.full_name} lacks or changes methods {missing}")
    return f"{len(services)} services, {SERVICE.full_name} with {', '.join(sorted(have))}"


@rule("list_verifiers", "ListVerifiers names the verifier with a version and advertises limits")
def check_list_verifiers(t: Target) -> str:
    resp = call(lambda: t.stub.ListVerifiers(pb.ListVerifiersRequest(), timeout=t.options.call_timeout_s), "ListVerifiers")
    served = {v.name: v for v in resp.verifiers}
    info = served.get(t.verifier)
    if info is None:
        raise CheckFailed(f"ListVerifiers names {sorted(served)}, not {t.verifier!r}")
    if not info.version.strip():
        raise CheckFailed(f"verifier {t.verifier!r} has an empty version (clients log and pin it)")
    lim = resp.limits
    unset = [f for f in ("max_groups_per_batch", "max_rollouts_per_group", "max_message_bytes") if not getattr(lim, f)]
    if unset:
        raise CheckFailed(f"ListVerifiers.limits leaves {', '.join(unset)} unset (clients size their batches by them)")
    t.limits = lim
    return (
        f"{t.verifier} {info.version}; limits: {lim.max_groups_per_batch} groups/batch, "
        f"{lim.max_rollouts_per_group} rollouts/group, {lim.max_message_bytes} bytes"
    )


# ---- answers -----------------------------------------------------------------------------------


def _expectation_problems(t: Target, results_by_case: dict[str, dict[int, pb.RolloutResult]], how: str) -> list[str]:
    problems = []
    for case in t.cases:
        got = results_by_case.get(case.request.group_id, {})
        for e in case.expect:
            r = got.get(e.index)
            where = f"{how}: case {case.name!r} rollout {e.index}"
            if r is None:
                problems.append(f"{where}: no result")
                continue
            status = pb.RolloutStatus.Name(r.status)
            if status != e.status:
                problems.append(f"{where}: status {status}, expected {e.status} ({r.detail[:80]})")
                continue
            if e.verdict is not None and pb.Verdict.Name(r.verdict) != e.verdict:
                problems.append(f"{where}: verdict {pb.Verdict.Name(r.verdict)}, expected {e.verdict}")
            if e.reward is not None and abs(r.reward - e.reward) > REWARD_TOLERANCE:
                problems.append(f"{where}: reward {r.reward:g}, expected {e.reward:g}")
            for name, value in e.components:
                have = r.reward_components.get(name)
                if have is None or abs(have - value) > REWARD_TOLERANCE:
                    problems.append(f"{where}: component {name}={have}, expected {value:g}")
            if e.steps is not None:
                have_steps = [(s.end, s.reward) for s in r.steps]
                if [x[0] for x in have_steps] != [x[0] for x in e.steps] or any(
                        abs(a[1] - b[1]) > REWARD_TOLERANCE for a, b in zip(have_steps, e.steps)):
                    problems.append(f"{where}: steps {have_steps}, expected {list(e.steps)}")
    return problems


@rule("known_answers", "every case in the cases file gets its expected status, verdict and reward")
def check_known_answers(t: Target) -> str:
    batch = t.batch()
    response = call(lambda: t.call_batch(batch), "BatchVerifyGroups of all cases")
    by_case = {req.group_id: {r.index: r for r in resp.results} for req, resp in zip(batch.requests, response.responses)}
    problems = _expectation_problems(t, by_case, "BatchVerifyGroups")
    single = {}
    for case in t.cases:
        resp = call(lambda: t.stub.VerifyGroup(case.request, timeout=t.options.call_timeout_s), f"VerifyGroup {case.name!r}")
        single[case.request.group_id] = {r.index: r for r in resp.results}
    problems += _expectation_problems(t, single, "VerifyGroup")
    if problems:
        raise CheckFailed(f"{len(problems)} wrong: " + "; ".join(problems[:3]))
    n = sum(len(c.expect) for c in t.cases)
    return f"{len(t.cases)} cases, {n} rollouts, through BatchVerifyGroups and VerifyGroup"


@rule("steps", "step rewards (optional) only on OK results, ends increasing within the completion, rewards finite")
def check_steps(t: Target) -> str:
    from cohort.verifiers.base import StepReward, step_problem

    batch = t.batch()
    response = call(lambda: t.call_batch(batch), "BatchVerifyGroups of all cases")
    problems, rollouts, steps = [], 0, 0
    for req, resp in zip(batch.requests, response.responses):
        completions = {r.index: r.completion for r in req.rollouts}
        for r in resp.results:
            if not r.steps:
                continue
            rollouts += 1
            steps += len(r.steps)
            where = f"group {req.group_id!r} rollout {r.index}"
            if r.status != pb.ROLLOUT_STATUS_OK:
                problems.append(f"{where}: step rewards on a {pb.RolloutStatus.Name(r.status)} result")
            elif (problem := step_problem([StepReward(s.end, s.reward) for s in r.steps], completions.get(r.index, ""))):
                problems.append(f"{where}: {problem} (completion of {len(completions.get(r.index, ''))} characters)")
    if problems:
        raise CheckFailed(f"{len(problems)} malformed: " + "; ".join(problems[:3]))
    if not rollouts:
        return "no step rewards (they are optional)"
    return f"{steps} step rewards on {rollouts} rollouts, all well formed"


def _scrambled(t: Target) -> pb.BatchVerifyGroupsRequest:
    """All cases in reverse order, rollouts reversed and renumbered (index i -> 7*i + 1000)."""
    batch = t.batch(suffix="#scrambled", reverse=True)
    for req in batch.requests:
        rollouts = list(reversed(req.rollouts))
        for r in rollouts:
            r.index = 7 * r.index + 1000
        del req.rollouts[:]
        req.rollouts.extend(rollouts)
    return batch


def _scrambled_call(t: Target) -> tuple[pb.BatchVerifyGroupsRequest, pb.BatchVerifyGroupsResponse]:
    batch = _scrambled(t)
    return batch, call(lambda: t.call_batch(batch), "BatchVerifyGroups with renumbered rollouts")


@rule("completeness", "one response per group and one result per rollout, indexes echoed")
def check_completeness(t: Target) -> str:
    batch, response = _scrambled_call(t)
    if len(response.responses) != len(batch.requests):
        raise CheckFailed(f"{len(response.responses)} responses for {len(batch.requests)} groups")
    for req, resp in zip(batch.requests, response.responses):
        want = sorted(r.index for r in req.rollouts)
        got = sorted(r.index for r in resp.results)
        if got != want:
            missing = sorted(set(want) - set(got))
            extra = sorted(set(got) - set(want))
            raise CheckFailed(
                f"group {req.group_id!r}: {len(got)} results for {len(want)} rollouts"
                + (f"; missing indexes {missing[:5]}" if missing else "")
                + (f"; unknown or repeated indexes {extra[:5] or got[:8]}" if extra or len(got) != len(set(got)) else "")
            )
        if resp.verifier and resp.verifier != t.verifier:
            raise CheckFailed(f"group {req.group_id!r} answered by verifier {resp.verifier!r}")
    for case in t.cases:
        resp = call(lambda: t.stub.VerifyGroup(case.request, timeout=t.options.call_timeout_s), f"VerifyGroup {case.name!r}")
        if sorted(r.index for r in resp.results) != sorted(r.index for r in case.request.rollouts):
            raise CheckFailed(f"VerifyGroup {case.name!r}: results {[r.index for r in resp.results]} "
                              f"for rollouts {[r.index for r in case.request.rollouts]}")
    return f"{len(batch.requests)} groups with renumbered indexes, all answered"


def _in_order(want: list, got: list) -> bool:
    """``got``'s items that are in ``want`` appear in ``want``'s order (missing items are another rule)."""
    position = {x: i for i, x in enumerate(want)}
    seen = [position[x] for x in got if x in position]
    return seen == sorted(seen)


@rule("order", "responses in request order, results in rollout order")
def check_order(t: Target) -> str:
    batch, response = _scrambled_call(t)
    want_groups = [r.group_id for r in batch.requests]
    got_groups = [r.group_id for r in response.responses]
    if not _in_order(want_groups, got_groups) or (len(got_groups) == len(want_groups) and got_groups != want_groups):
        raise CheckFailed(f"groups answered in the order {got_groups[:4]}..., requested {want_groups[:4]}...")
    by_id = {r.group_id: r for r in response.responses}
    for req in batch.requests:
        resp = by_id.get(req.group_id)
        if resp is None:
            continue
        want = [r.index for r in req.rollouts]
        got = [r.index for r in resp.results]
        if not _in_order(want, got):
            raise CheckFailed(f"group {req.group_id!r}: results in the order {got[:8]}, rollouts were {want[:8]}")
    for case in t.cases:
        resp = call(lambda: t.stub.VerifyGroup(case.request, timeout=t.options.call_timeout_s), f"VerifyGroup {case.name!r}")
        want = [r.index for r in case.request.rollouts]
        if not _in_order(want, [r.index for r in resp.results]):
            raise CheckFailed(f"VerifyGroup {case.name!r}: results in the order {[r.index for r in resp.results]}, rollouts were {want}")
    problems = t.compare_to_baseline(_unscramble(batch), _unscramble_response(response), "renumbered batch")
    if problems:
        raise CheckFailed("reordering the request changed verdicts: " + "; ".join(problems))
    return f"{len(batch.requests)} groups in reverse, rollouts reversed and renumbered"


def _unscramble(batch: pb.BatchVerifyGroupsRequest) -> pb.BatchVerifyGroupsRequest:
    out = pb.BatchVerifyGroupsRequest()
    out.CopyFrom(batch)
    for req in out.requests:
        for r in req.rollouts:
            r.index = (r.index - 1000) // 7
    return out


def _unscramble_response(response: pb.BatchVerifyGroupsResponse) -> pb.BatchVerifyGroupsResponse:
    out = pb.BatchVerifyGroupsResponse()
    out.CopyFrom(response)
    for resp in out.responses:
        for r in resp.results:
            r.index = (r.index - 1000) // 7 if r.index >= 1000 else r.index + 10**6
    return out


@rule("determinism", "the same request twice gives the same statuses, verdicts and rewards")
def check_determinism(t: Target) -> str:
    base = t.baseline()
    for attempt in range(3):
        batch = t.batch()
        response = call(lambda: t.call_batch(batch), "BatchVerifyGroups (repeat)")
        problems = t.compare_to_baseline(batch, response, f"repeat {attempt + 1}")
        if problems:
            raise CheckFailed("; ".join(problems))
    for case in t.cases:
        resp = call(lambda: t.stub.VerifyGroup(case.request, timeout=t.options.call_timeout_s), f"VerifyGroup {case.name!r}")
        for r in resp.results:
            want = base[case.request.group_id].get(r.index)
            if want is not None and outcome(r) != want:
                raise CheckFailed(f"case {case.name!r} rollout {r.index}: VerifyGroup gives {describe(outcome(r))}, "
                                  f"BatchVerifyGroups gave {describe(want)}")
    return "4 identical batches and VerifyGroup agree exactly"


# ---- errors ------------------------------------------------------------------------------------


def _group(t: Target, **changes) -> pb.VerifyGroupRequest:
    req = pb.VerifyGroupRequest()
    req.CopyFrom(t.cases[0].request)
    for key, value in changes.items():
        if key == "rollouts":
            del req.rollouts[:]
            req.rollouts.extend(value)
        else:
            setattr(req, key, value)
    return req


def _bad_requests(t: Target) -> list[tuple[str, Callable[[], object], grpc.StatusCode]]:
    timeout = t.options.call_timeout_s
    batch = t.stub.BatchVerifyGroups
    unknown = f"no-such-verifier-{uuid.uuid4().hex[:6]}"
    first = t.cases[0].request.rollouts[0]
    one = pb.Rollout(index=0, completion=first.completion)
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    bad: list[tuple[str, Callable[[], object], grpc.StatusCode]] = [
        ("unknown verifier", lambda: batch(pb.BatchVerifyGroupsRequest(requests=[_group(t, verifier=unknown)]), timeout=timeout), invalid),
        ("unknown verifier (VerifyGroup)", lambda: t.stub.VerifyGroup(_group(t, verifier=unknown), timeout=timeout), invalid),
        ("empty group", lambda: batch(pb.BatchVerifyGroupsRequest(requests=[_group(t, rollouts=[])]), timeout=timeout), invalid),
        ("empty batch", lambda: batch(pb.BatchVerifyGroupsRequest(), timeout=timeout), invalid),
        (
            "duplicate rollout index",
            lambda: batch(pb.BatchVerifyGroupsRequest(requests=[_group(t, rollouts=[one, one])]), timeout=timeout),
            invalid,
        ),
    ]
    lim = t.limits
    if lim is not None and lim.max_groups_per_batch and lim.max_groups_per_batch < LIMIT_CAP:
        n = lim.max_groups_per_batch + 1
        groups = [_group(t, rollouts=[one], group_id=f"g{k}") for k in range(n)]
        bad.append((f"{n} groups (limit {n - 1})", lambda: batch(pb.BatchVerifyGroupsRequest(requests=groups), timeout=timeout), invalid))
    if lim is not None and lim.max_rollouts_per_group and lim.max_rollouts_per_group < LIMIT_CAP:
        n = lim.max_rollouts_per_group + 1
        rollouts = [pb.Rollout(index=k, completion=first.completion) for k in range(n)]
        bad.append((f"{n} rollouts (limit {n - 1})", lambda: batch(pb.BatchVerifyGroupsRequest(requests=[_group(t, rollouts=rollouts)]), timeout=timeout), invalid))
    if lim is not None and lim.max_message_bytes and lim.max_message_bytes < MESSAGE_CAP:
        size = lim.max_message_bytes + 1024
        huge = [pb.Rollout(index=0, completion="x" * size)]
        bad.append((f"{size}-byte message", lambda: batch(pb.BatchVerifyGroupsRequest(requests=[_group(t, rollouts=huge)]), timeout=timeout), grpc.StatusCode.RESOURCE_EXHAUSTED))
    return bad


@rule("status_codes", "bad requests fail with the documented status codes; the server survives them")
def check_status_codes(t: Target) -> str:
    problems = []
    bad = _bad_requests(t)
    for what, send, expected in bad:
        try:
            send()
        except grpc.RpcError as exc:
            if exc.code() is not expected:
                problems.append(f"{what}: {exc.code().name} ({exc.details()[:60]}), expected {expected.name}")
        else:
            problems.append(f"{what}: accepted, expected {expected.name}")
    if problems:
        raise CheckFailed("; ".join(problems[:3]) + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""))
    try:
        check_health(t)
    except CheckFailed as exc:
        if "no grpc.health.v1.Health" not in str(exc):  # a missing health service is the health rule's finding
            raise CheckFailed(f"after the bad requests: {exc}") from None
    batch = t.batch()
    after = t.compare_to_baseline(batch, call(lambda: t.call_batch(batch), "a good batch after the bad requests"), "after bad requests")
    if after:
        raise CheckFailed("; ".join(after))
    return f"{len(bad)} bad requests rejected with their codes; still SERVING and scoring"


MESSAGE_MARGIN = 4096  # "just under": the batch is this many bytes below the advertised max_message_bytes
PAD_PER_GROUP = 256 * 1024  # prompt padding per group, so no one field is near a per-field limit


def _near_limit_batch(t: Target, limit: int) -> pb.BatchVerifyGroupsRequest:
    """The cases, repeated over enough groups, each ``prompt`` prefixed with spaces so the serialized
    batch is ``MESSAGE_MARGIN`` bytes under ``limit`` (the completions, and so the verdicts, are unchanged)."""
    target = limit - MESSAGE_MARGIN
    n_groups = min(t.max_groups(), max(len(t.cases), -(-target // PAD_PER_GROUP)))
    batch = t.repeated_batch(n_groups, tag="big")
    pad = max(0, target - batch.ByteSize())
    originals = [req.prompt for req in batch.requests]
    for _ in range(4):  # the length prefixes grow with the padding: correct the total until it fits
        share, extra = divmod(pad, len(batch.requests))
        for k, (req, prompt) in enumerate(zip(batch.requests, originals)):
            req.prompt = " " * (share + (k < extra)) + prompt
        over = batch.ByteSize() - target
        if over == 0 or pad == 0:
            break
        pad = max(0, pad - over)
    return batch


@rule("message_size", "a batch just under the advertised max_message_bytes is answered like the small one")
def check_message_size(t: Target) -> str:
    lim = t.limits
    if lim is None:  # not fetched at start: ask now (a hung server fails here like every other rule)
        resp = call(lambda: t.stub.ListVerifiers(pb.ListVerifiersRequest(), timeout=t.options.call_timeout_s), "ListVerifiers")
        lim = resp.limits if resp.HasField("limits") else None
    limit = lim.max_message_bytes if lim is not None else 0
    if not limit:
        raise CheckSkipped("ListVerifiers advertises no max_message_bytes (the list_verifiers rule reports it)")
    if limit > MESSAGE_CAP:
        raise CheckSkipped(f"max_message_bytes {limit} is above the kit's {MESSAGE_CAP}-byte cap")
    t.baseline()
    batch = _near_limit_batch(t, limit)
    size = batch.ByteSize()
    if size >= limit:
        raise CheckSkipped(f"cannot build a batch under {limit} bytes from these cases (the smallest is {size})")
    try:
        response = t.call_batch(batch)
    except grpc.RpcError as exc:
        hint = ""
        if exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED:
            hint = ("; the server receives less than it advertises (gRPC's default receive limit is 4 MiB; set "
                    "grpc.max_receive_message_length to the advertised max_message_bytes); a client sizing its "
                    "batches by the advertised limit gets every rollout of such a batch masked")
        raise CheckFailed(f"a {size}-byte batch ({len(batch.requests)} groups, advertised limit {limit}) failed "
                          f"{exc.code().name} ({exc.details()[:80]}){hint}") from None
    problems = t.compare_to_baseline(batch, response, f"the {size}-byte batch")
    if problems:
        raise CheckFailed("; ".join(problems))
    return f"a {size}-byte batch ({len(batch.requests)} groups) answered, advertised limit {limit}"


# ---- load --------------------------------------------------------------------------------------


@rule("concurrency", "many simultaneous batches give the same verdicts as serial ones")
def check_concurrency(t: Target) -> str:
    t.baseline()
    n = t.options.concurrent_batches
    size = len(t.cases)
    batches = []
    for k in range(n):
        batch = t.repeated_batch(size + k % 4, tag=f"c{k}")  # different shapes, so a mix-up shows
        rotated = list(batch.requests)[k % len(batch.requests):] + list(batch.requests)[: k % len(batch.requests)]
        batches.append(pb.BatchVerifyGroupsRequest(requests=rotated))
    futures = [t.stub.BatchVerifyGroups.future(b, timeout=t.options.call_timeout_s) for b in batches]
    problems: list[str] = []
    for k, (batch, (resp, err, _)) in enumerate(zip(batches, wait_futures(futures))):
        if err is not None:
            problems.append(f"batch {k}: {err.code().name}: {err.details()}")
        else:
            problems += t.compare_to_baseline(batch, resp, f"concurrent batch {k}", limit=1)
    if problems:
        raise CheckFailed(f"{len(problems)} of {n} concurrent batches differ: " + "; ".join(problems[:2]))
    return f"{n} simultaneous batches of {size} to {size + 3} groups match the serial verdicts"


@rule("deadline", "a 50 ms deadline is answered or fails DEADLINE_EXCEEDED; the server then recovers")
def check_deadline(t: Target) -> str:
    t.baseline()
    short = t.options.short_deadline_s
    batches = [t.repeated_batch(256, tag=f"d{k}") for k in range(32)]
    started = time.monotonic()
    futures = [t.stub.BatchVerifyGroups.future(b, timeout=short) for b in batches]
    outcomes = wait_futures(futures)
    slowest = max(done for _, _, done in outcomes) - started
    answered = expired = 0
    for k, (batch, (resp, err, _)) in enumerate(zip(batches, outcomes)):
        if err is None:
            answered += 1
            problems = t.compare_to_baseline(batch, resp, f"batch {k} with a {short * 1000:g} ms deadline", limit=1,
                                             allow_timeout=True)
            if problems:
                raise CheckFailed(problems[0])
        elif err.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
            expired += 1
        else:
            raise CheckFailed(f"a call with a {short * 1000:g} ms deadline failed {err.code().name} ({err.details()}), "
                              "expected an answer or DEADLINE_EXCEEDED")
    if slowest > short + 5.0:
        raise CheckFailed(f"calls with a {short * 1000:g} ms deadline took {slowest:.1f}s to end")
    # A server that keeps working on abandoned calls (or hangs on them) is still busy now.
    recover = t.options.recovery_s
    try:
        batch = t.batch(suffix="")
        response = t.call_batch(batch, timeout_s=recover)
    except grpc.RpcError as exc:
        raise CheckFailed(
            f"after 32 calls with a {short * 1000:g} ms deadline, a normal call failed within {recover:g}s "
            f"({exc.code().name}): the server keeps working on (or hangs in) calls whose deadline has passed"
        ) from None
    problems = t.compare_to_baseline(batch, response, "after short deadlines")
    if problems:
        raise CheckFailed("; ".join(problems))
    return f"32 calls at {short * 1000:g} ms: {answered} answered, {expired} DEADLINE_EXCEEDED; recovered"


@rule("sigterm", "on SIGTERM: in-flight calls finish, new calls get UNAVAILABLE, the process exits 0")
def check_sigterm(t: Target) -> str:
    proc = t.process  # set only when the kit started the server (runner.ServerProcess): no import back up
    if proc is None:
        raise CheckSkipped("needs --server-cmd (the kit must start the server to signal it)")
    if proc.poll() is not None:
        raise CheckFailed(f"the server already exited with code {proc.poll()} before SIGTERM")
    t.baseline()
    # Load the server for about a second so that calls are in flight when the signal lands:
    # grow one batch until it takes 0.2 s (or hits 1024 groups), then send enough of them at once.
    size = len(t.cases)
    while True:
        probe = t.repeated_batch(size, tag="p")
        started = time.monotonic()
        call(lambda: t.call_batch(probe), f"a batch of {len(probe.requests)} groups")
        one = max(time.monotonic() - started, 1e-3)
        if one >= 0.2 or size >= min(1024, t.max_groups()):
            break
        size *= 4
    n = int(min(64, max(4, 1.0 / one)))
    if t.max_queued():  # stay within half the advertised queue: load past it is refused by design (RESOURCE_EXHAUSTED)
        n = max(2, min(n, t.max_queued() // (2 * size)))
    batches = [t.repeated_batch(size, tag=f"s{k}") for k in range(n)]
    futures = [t.stub.BatchVerifyGroups.future(b, timeout=t.options.grace_s + 30) for b in batches]
    time.sleep(min(0.25, one * n / 4))
    signalled = time.monotonic()
    proc.terminate()
    outcomes = wait_futures(futures)
    finished_after = rejected = 0
    for k, (batch, (resp, err, done)) in enumerate(zip(batches, outcomes)):
        if err is None:
            problems = t.compare_to_baseline(batch, resp, f"in-flight batch {k}", limit=1)
            if problems:
                raise CheckFailed(problems[0])
            finished_after += done > signalled
        elif err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED) and done > signalled:
            rejected += 1  # not started before the signal: refused (clients retry these elsewhere)
        else:
            raise CheckFailed(f"an in-flight call failed {err.code().name} ({err.details()}) after SIGTERM")
    try:
        t.call_batch(t.batch(), timeout_s=5.0)
    except grpc.RpcError as exc:
        # UNAVAILABLE from the draining server, or from the closed port; CANCELLED when it arrives
        # while the gRPC core is shutting down. All three are refusals a client retries elsewhere.
        if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED):
            raise CheckFailed(f"a new call after SIGTERM failed {exc.code().name}, expected UNAVAILABLE") from None
    else:
        if proc.poll() is None:
            raise CheckFailed("the server still accepted new work after SIGTERM (expected UNAVAILABLE)")
    code = proc.wait(t.options.grace_s)
    if code is None:
        raise CheckFailed(f"the server did not exit within {t.options.grace_s:g}s of SIGTERM")
    if code != 0:
        raise CheckFailed(f"the server exited with code {code} after SIGTERM (expected a clean 0 after draining); "
                          f"{finished_after} in-flight calls finished, {rejected} were cut off")
    if finished_after == 0 and rejected == n:
        raise CheckFailed(f"all {n} in-flight calls were dropped, none finished after SIGTERM")
    return f"{finished_after} of {n} in-flight calls finished after SIGTERM, {rejected} refused; exited 0"
