"""One server interceptor for every Cohort service: a call's outcome as a gRPC status code.

A servicer converts messages and calls its domain code; what that code refuses it raises as a domain error
(the verifier host's ``InvalidRequest`` and ``QueueFull``, the sandbox's ``SandboxError``, ...), never a
status code. :class:`StatusInterceptor`, which :class:`~cohort.rpc.runtime.GrpcRuntime` installs on every
server, turns each call's outcome into a status, once for all services:

- a unary request that does not parse is INVALID_ARGUMENT, for every method of every service on the server
  (health and its ``Watch`` included; gRPC itself would answer UNKNOWN). Streaming requests (reflection) are
  left to gRPC;
- for a service registered with :meth:`StatusInterceptor.add` (``GrpcRuntime.add_service``):
  - a call that arrives while the server drains is UNAVAILABLE (the client fails over to another replica);
  - a domain error is the code its service's table gives its class (the first match in table order), with
    the error's text as details; a server-side code (UNAVAILABLE, INTERNAL) is also logged;
  - the call counts as in flight while it runs (a drain waits for it), and ``observe(method, code, seconds)``
    hears its outcome (a service's metrics).

Anything else a servicer raises is a bug: gRPC answers UNKNOWN and logs it.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import grpc

log = logging.getLogger("cohort.grpc")

Errors = Mapping[type[BaseException], grpc.StatusCode]
"""A service's domain errors and their status codes."""
Observe = Callable[[str, str, float], None]
"""Told each call's method name (``VerifyGroup``), status code name (``OK``) and seconds."""

DRAINING = "server is draining (shutting down); retry on another replica"
_LOGGED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL)


class Runtime(Protocol):
    """What the interceptor reads of its server (:class:`~cohort.rpc.runtime.GrpcRuntime`)."""

    draining: bool

    def track(self) -> contextlib.AbstractContextManager[None]: ...


@dataclass(frozen=True)
class _Service:
    errors: tuple[tuple[type[BaseException], grpc.StatusCode], ...]
    observe: Observe | None


class StatusInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.services: dict[str, _Service] = {}

    def add(self, service: str, errors: Errors | None = None, observe: Observe | None = None) -> None:
        """Refuse ``service``'s calls while draining, track them, map its ``errors`` (its full name:
        ``grpo.verifier.v1.VerifierService``)."""
        self.services[service] = _Service(tuple((errors or {}).items()), observe)

    def code_of(self, service: str, exc: BaseException) -> grpc.StatusCode | None:
        """The status code ``service`` gives ``exc`` (None: not one of its domain errors)."""
        return next((code for kind, code in self.services[service].errors if isinstance(exc, kind)), None)

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.request_deserializer is None:
            return handler
        _, service, name = handler_call_details.method.split("/", 2)
        parse = _parser(handler.request_deserializer, handler_call_details.method)
        if handler.response_streaming:
            behaviour = handler.unary_stream

            async def stream(payload: bytes, context):
                result = behaviour(await parse(payload, context), context)
                if inspect.isasyncgen(result):
                    async for item in result:
                        yield item
                else:  # a coroutine writing with context.write()
                    await result

            return grpc.unary_stream_rpc_method_handler(stream, None, handler.response_serializer)
        unary = handler.unary_unary
        if service not in self.services:  # health, reflection: parsing only

            async def plain(payload: bytes, context):
                result = unary(await parse(payload, context), context)
                return await result if inspect.isawaitable(result) else result

            return grpc.unary_unary_rpc_method_handler(plain, None, handler.response_serializer)

        async def call(payload: bytes, context):
            with self._outcome(service, name, context) as outcome:
                if self.runtime.draining:
                    outcome.code = grpc.StatusCode.UNAVAILABLE
                    await context.abort(outcome.code, DRAINING)
                request = await parse(payload, context)
                with self.runtime.track():
                    try:
                        result = unary(request, context)
                        return await result if inspect.isawaitable(result) else result
                    except Exception as exc:
                        code = self.code_of(service, exc)
                        if code is None:
                            raise
                        outcome.code = code
                        if code in _LOGGED:
                            log.error("%s: %s: %s", handler_call_details.method, code.name, exc)
                        await context.abort(code, str(exc))

        return grpc.unary_unary_rpc_method_handler(call, None, handler.response_serializer)

    @contextlib.contextmanager
    def _outcome(self, service: str, method: str, context) -> Iterator[_Outcome]:
        outcome = _Outcome()
        start = time.perf_counter()
        try:
            yield outcome
        except BaseException:
            if outcome.code is grpc.StatusCode.OK:  # aborted by the servicer, cancelled, or a bug
                outcome.code = context.code() or grpc.StatusCode.UNKNOWN
            raise
        finally:
            observe = self.services[service].observe
            if observe is not None:
                code = outcome.code if isinstance(outcome.code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN
                observe(method, code.name, time.perf_counter() - start)


@dataclass
class _Outcome:
    code: grpc.StatusCode = grpc.StatusCode.OK


def _parser(parse: Callable[[bytes], object], method: str):
    async def parsed(payload: bytes, context):
        try:
            return parse(payload)
        except Exception as exc:  # DecodeError, or any parser failure: the request is malformed
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{method}: the request does not parse ({type(exc).__name__})")

    return parsed
