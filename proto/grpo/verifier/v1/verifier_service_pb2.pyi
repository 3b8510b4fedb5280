import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RolloutStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLLOUT_STATUS_UNSPECIFIED: _ClassVar[RolloutStatus]
    ROLLOUT_STATUS_OK: _ClassVar[RolloutStatus]
    ROLLOUT_STATUS_INVALID_REFERENCE: _ClassVar[RolloutStatus]
    ROLLOUT_STATUS_VERIFIER_TIMEOUT: _ClassVar[RolloutStatus]
    ROLLOUT_STATUS_VERIFIER_ERROR: _ClassVar[RolloutStatus]
    ROLLOUT_STATUS_DEPENDENCY_UNAVAILABLE: _ClassVar[RolloutStatus]

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERDICT_UNSPECIFIED: _ClassVar[Verdict]
    VERDICT_CORRECT: _ClassVar[Verdict]
    VERDICT_INCORRECT: _ClassVar[Verdict]
    VERDICT_NO_ANSWER: _ClassVar[Verdict]
    VERDICT_PARTIAL: _ClassVar[Verdict]
    VERDICT_RESOURCE_LIMIT_EXCEEDED: _ClassVar[Verdict]
    VERDICT_RUNTIME_ERROR: _ClassVar[Verdict]

class OutputComparison(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTPUT_COMPARISON_UNSPECIFIED: _ClassVar[OutputComparison]
    OUTPUT_COMPARISON_EXACT: _ClassVar[OutputComparison]
    OUTPUT_COMPARISON_WHITESPACE: _ClassVar[OutputComparison]
ROLLOUT_STATUS_UNSPECIFIED: RolloutStatus
ROLLOUT_STATUS_OK: RolloutStatus
ROLLOUT_STATUS_INVALID_REFERENCE: RolloutStatus
ROLLOUT_STATUS_VERIFIER_TIMEOUT: RolloutStatus
ROLLOUT_STATUS_VERIFIER_ERROR: RolloutStatus
ROLLOUT_STATUS_DEPENDENCY_UNAVAILABLE: RolloutStatus
VERDICT_UNSPECIFIED: Verdict
VERDICT_CORRECT: Verdict
VERDICT_INCORRECT: Verdict
VERDICT_NO_ANSWER: Verdict
VERDICT_PARTIAL: Verdict
VERDICT_RESOURCE_LIMIT_EXCEEDED: Verdict
VERDICT_RUNTIME_ERROR: Verdict
OUTPUT_COMPARISON_UNSPECIFIED: OutputComparison
OUTPUT_COMPARISON_EXACT: OutputComparison
OUTPUT_COMPARISON_WHITESPACE: OutputComparison

class Rollout(_message.Message):
    __slots__ = ("index", "completion", "truncated")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    index: int
    completion: str
    truncated: bool
    def __init__(self, index: _Optional[int] = ..., completion: _Optional[str] = ..., truncated: _Optional[bool] = ...) -> None: ...

class AssertTests(_message.Message):
    __slots__ = ("asserts", "setup_code")
    ASSERTS_FIELD_NUMBER: _ClassVar[int]
    SETUP_CODE_FIELD_NUMBER: _ClassVar[int]
    asserts: _containers.RepeatedScalarFieldContainer[str]
    setup_code: str
    def __init__(self, asserts: _Optional[_Iterable[str]] = ..., setup_code: _Optional[str] = ...) -> None: ...

class FunctionTests(_message.Message):
    __slots__ = ("test_code", "entry_point")
    TEST_CODE_FIELD_NUMBER: _ClassVar[int]
    ENTRY_POINT_FIELD_NUMBER: _ClassVar[int]
    test_code: str
    entry_point: str
    def __init__(self, test_code: _Optional[str] = ..., entry_point: _Optional[str] = ...) -> None: ...

class IoCase(_message.Message):
    __slots__ = ("stdin", "expected_stdout")
    STDIN_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_STDOUT_FIELD_NUMBER: _ClassVar[int]
    stdin: str
    expected_stdout: str
    def __init__(self, stdin: _Optional[str] = ..., expected_stdout: _Optional[str] = ...) -> None: ...

class IoTests(_message.Message):
    __slots__ = ("cases", "comparison")
    CASES_FIELD_NUMBER: _ClassVar[int]
    COMPARISON_FIELD_NUMBER: _ClassVar[int]
    cases: _containers.RepeatedCompositeFieldContainer[IoCase]
    comparison: OutputComparison
    def __init__(self, cases: _Optional[_Iterable[_Union[IoCase, _Mapping]]] = ..., comparison: _Optional[_Union[OutputComparison, str]] = ...) -> None: ...

class CodeTests(_message.Message):
    __slots__ = ("asserts", "function", "io")
    ASSERTS_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    IO_FIELD_NUMBER: _ClassVar[int]
    asserts: AssertTests
    function: FunctionTests
    io: IoTests
    def __init__(self, asserts: _Optional[_Union[AssertTests, _Mapping]] = ..., function: _Optional[_Union[FunctionTests, _Mapping]] = ..., io: _Optional[_Union[IoTests, _Mapping]] = ...) -> None: ...

class Reference(_message.Message):
    __slots__ = ("answer", "code_tests")
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    CODE_TESTS_FIELD_NUMBER: _ClassVar[int]
    answer: str
    code_tests: CodeTests
    def __init__(self, answer: _Optional[str] = ..., code_tests: _Optional[_Union[CodeTests, _Mapping]] = ...) -> None: ...

class VerifyGroupRequest(_message.Message):
    __slots__ = ("group_id", "verifier", "prompt", "reference", "rollouts", "rollout_timeout", "options")
    class OptionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    VERIFIER_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    ROLLOUTS_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    verifier: str
    prompt: str
    reference: Reference
    rollouts: _containers.RepeatedCompositeFieldContainer[Rollout]
    rollout_timeout: _duration_pb2.Duration
    options: _containers.ScalarMap[str, str]
    def __init__(self, group_id: _Optional[str] = ..., verifier: _Optional[str] = ..., prompt: _Optional[str] = ..., reference: _Optional[_Union[Reference, _Mapping]] = ..., rollouts: _Optional[_Iterable[_Union[Rollout, _Mapping]]] = ..., rollout_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., options: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RolloutResult(_message.Message):
    __slots__ = ("index", "status", "verdict", "reward", "reward_components", "detail", "verify_duration", "flags", "steps")
    class RewardComponentsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    INDEX_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    REWARD_COMPONENTS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    VERIFY_DURATION_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    index: int
    status: RolloutStatus
    verdict: Verdict
    reward: float
    reward_components: _containers.ScalarMap[str, float]
    detail: str
    verify_duration: _duration_pb2.Duration
    flags: _containers.RepeatedScalarFieldContainer[str]
    steps: _containers.RepeatedCompositeFieldContainer[StepReward]
    def __init__(self, index: _Optional[int] = ..., status: _Optional[_Union[RolloutStatus, str]] = ..., verdict: _Optional[_Union[Verdict, str]] = ..., reward: _Optional[float] = ..., reward_components: _Optional[_Mapping[str, float]] = ..., detail: _Optional[str] = ..., verify_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., flags: _Optional[_Iterable[str]] = ..., steps: _Optional[_Iterable[_Union[StepReward, _Mapping]]] = ...) -> None: ...

class StepReward(_message.Message):
    __slots__ = ("end", "reward")
    END_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    end: int
    reward: float
    def __init__(self, end: _Optional[int] = ..., reward: _Optional[float] = ...) -> None: ...

class VerifyGroupResponse(_message.Message):
    __slots__ = ("group_id", "verifier", "verifier_version", "results", "verify_duration")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    VERIFIER_FIELD_NUMBER: _ClassVar[int]
    VERIFIER_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    VERIFY_DURATION_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    verifier: str
    verifier_version: str
    results: _containers.RepeatedCompositeFieldContainer[RolloutResult]
    verify_duration: _duration_pb2.Duration
    def __init__(self, group_id: _Optional[str] = ..., verifier: _Optional[str] = ..., verifier_version: _Optional[str] = ..., results: _Optional[_Iterable[_Union[RolloutResult, _Mapping]]] = ..., verify_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class BatchVerifyGroupsRequest(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[VerifyGroupRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[VerifyGroupRequest, _Mapping]]] = ...) -> None: ...

class BatchVerifyGroupsResponse(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[VerifyGroupResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[VerifyGroupResponse, _Mapping]]] = ...) -> None: ...

class ListVerifiersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class VerifierInfo(_message.Message):
    __slots__ = ("name", "version", "description", "reference_kinds")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_KINDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    description: str
    reference_kinds: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., description: _Optional[str] = ..., reference_kinds: _Optional[_Iterable[str]] = ...) -> None: ...

class ServerLimits(_message.Message):
    __slots__ = ("max_groups_per_batch", "max_rollouts_per_group", "max_message_bytes", "max_queued_groups", "max_rollout_timeout")
    MAX_GROUPS_PER_BATCH_FIELD_NUMBER: _ClassVar[int]
    MAX_ROLLOUTS_PER_GROUP_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUED_GROUPS_FIELD_NUMBER: _ClassVar[int]
    MAX_ROLLOUT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    max_groups_per_batch: int
    max_rollouts_per_group: int
    max_message_bytes: int
    max_queued_groups: int
    max_rollout_timeout: _duration_pb2.Duration
    def __init__(self, max_groups_per_batch: _Optional[int] = ..., max_rollouts_per_group: _Optional[int] = ..., max_message_bytes: _Optional[int] = ..., max_queued_groups: _Optional[int] = ..., max_rollout_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ListVerifiersResponse(_message.Message):
    __slots__ = ("verifiers", "limits", "server_version")
    VERIFIERS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    verifiers: _containers.RepeatedCompositeFieldContainer[VerifierInfo]
    limits: ServerLimits
    server_version: str
    def __init__(self, verifiers: _Optional[_Iterable[_Union[VerifierInfo, _Mapping]]] = ..., limits: _Optional[_Union[ServerLimits, _Mapping]] = ..., server_version: _Optional[str] = ...) -> None: ...
