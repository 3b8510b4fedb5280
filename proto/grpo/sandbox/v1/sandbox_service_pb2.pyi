import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExecutionStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTION_STATUS_UNSPECIFIED: _ClassVar[ExecutionStatus]
    EXECUTION_STATUS_EXITED: _ClassVar[ExecutionStatus]
    EXECUTION_STATUS_TIME_LIMIT_EXCEEDED: _ClassVar[ExecutionStatus]
    EXECUTION_STATUS_MEMORY_LIMIT_EXCEEDED: _ClassVar[ExecutionStatus]
    EXECUTION_STATUS_OUTPUT_LIMIT_EXCEEDED: _ClassVar[ExecutionStatus]

class TestCause(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TEST_CAUSE_UNSPECIFIED: _ClassVar[TestCause]
    TEST_CAUSE_NONE: _ClassVar[TestCause]
    TEST_CAUSE_ASSERTION: _ClassVar[TestCause]
    TEST_CAUSE_RUNTIME_ERROR: _ClassVar[TestCause]
    TEST_CAUSE_TIME_LIMIT: _ClassVar[TestCause]
    TEST_CAUSE_MEMORY_LIMIT: _ClassVar[TestCause]
    TEST_CAUSE_OUTPUT_LIMIT: _ClassVar[TestCause]
EXECUTION_STATUS_UNSPECIFIED: ExecutionStatus
EXECUTION_STATUS_EXITED: ExecutionStatus
EXECUTION_STATUS_TIME_LIMIT_EXCEEDED: ExecutionStatus
EXECUTION_STATUS_MEMORY_LIMIT_EXCEEDED: ExecutionStatus
EXECUTION_STATUS_OUTPUT_LIMIT_EXCEEDED: ExecutionStatus
TEST_CAUSE_UNSPECIFIED: TestCause
TEST_CAUSE_NONE: TestCause
TEST_CAUSE_ASSERTION: TestCause
TEST_CAUSE_RUNTIME_ERROR: TestCause
TEST_CAUSE_TIME_LIMIT: TestCause
TEST_CAUSE_MEMORY_LIMIT: TestCause
TEST_CAUSE_OUTPUT_LIMIT: TestCause

class Limits(_message.Message):
    __slots__ = ("wall_time", "cpu_time", "memory_bytes", "output_bytes", "max_processes", "disk_bytes")
    WALL_TIME_FIELD_NUMBER: _ClassVar[int]
    CPU_TIME_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_PROCESSES_FIELD_NUMBER: _ClassVar[int]
    DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    wall_time: _duration_pb2.Duration
    cpu_time: _duration_pb2.Duration
    memory_bytes: int
    output_bytes: int
    max_processes: int
    disk_bytes: int
    def __init__(self, wall_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., cpu_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., memory_bytes: _Optional[int] = ..., output_bytes: _Optional[int] = ..., max_processes: _Optional[int] = ..., disk_bytes: _Optional[int] = ...) -> None: ...

class File(_message.Message):
    __slots__ = ("path", "content")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    path: str
    content: bytes
    def __init__(self, path: _Optional[str] = ..., content: _Optional[bytes] = ...) -> None: ...

class ExecuteCodeRequest(_message.Message):
    __slots__ = ("language", "code", "stdin", "limits", "files")
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    language: str
    code: str
    stdin: bytes
    limits: Limits
    files: _containers.RepeatedCompositeFieldContainer[File]
    def __init__(self, language: _Optional[str] = ..., code: _Optional[str] = ..., stdin: _Optional[bytes] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., files: _Optional[_Iterable[_Union[File, _Mapping]]] = ...) -> None: ...

class ExecuteCodeResponse(_message.Message):
    __slots__ = ("status", "exit_code", "signal", "stdout", "stderr", "stdout_truncated", "stderr_truncated", "wall_time", "cpu_time")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STDOUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    STDERR_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    WALL_TIME_FIELD_NUMBER: _ClassVar[int]
    CPU_TIME_FIELD_NUMBER: _ClassVar[int]
    status: ExecutionStatus
    exit_code: int
    signal: int
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    wall_time: _duration_pb2.Duration
    cpu_time: _duration_pb2.Duration
    def __init__(self, status: _Optional[_Union[ExecutionStatus, str]] = ..., exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., stdout_truncated: _Optional[bool] = ..., stderr_truncated: _Optional[bool] = ..., wall_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., cpu_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class AssertTests(_message.Message):
    __slots__ = ("asserts", "setup_code")
    ASSERTS_FIELD_NUMBER: _ClassVar[int]
    SETUP_CODE_FIELD_NUMBER: _ClassVar[int]
    asserts: _containers.RepeatedScalarFieldContainer[str]
    setup_code: str
    def __init__(self, asserts: _Optional[_Iterable[str]] = ..., setup_code: _Optional[str] = ...) -> None: ...

class FunctionTest(_message.Message):
    __slots__ = ("test_code", "entry_point")
    TEST_CODE_FIELD_NUMBER: _ClassVar[int]
    ENTRY_POINT_FIELD_NUMBER: _ClassVar[int]
    test_code: str
    entry_point: str
    def __init__(self, test_code: _Optional[str] = ..., entry_point: _Optional[str] = ...) -> None: ...

class RunTestsRequest(_message.Message):
    __slots__ = ("language", "code", "asserts", "function", "per_test_timeout", "stop_at_first_failure", "limits")
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    ASSERTS_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    PER_TEST_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    STOP_AT_FIRST_FAILURE_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    language: str
    code: str
    asserts: AssertTests
    function: FunctionTest
    per_test_timeout: _duration_pb2.Duration
    stop_at_first_failure: bool
    limits: Limits
    def __init__(self, language: _Optional[str] = ..., code: _Optional[str] = ..., asserts: _Optional[_Union[AssertTests, _Mapping]] = ..., function: _Optional[_Union[FunctionTest, _Mapping]] = ..., per_test_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., stop_at_first_failure: _Optional[bool] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ...) -> None: ...

class TestOutcome(_message.Message):
    __slots__ = ("passed", "cause", "error")
    PASSED_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    passed: bool
    cause: TestCause
    error: str
    def __init__(self, passed: _Optional[bool] = ..., cause: _Optional[_Union[TestCause, str]] = ..., error: _Optional[str] = ...) -> None: ...

class RunTestsResponse(_message.Message):
    __slots__ = ("outcomes", "load_error", "load_cause", "candidate_stdout", "candidate_stderr", "wall_time")
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    LOAD_ERROR_FIELD_NUMBER: _ClassVar[int]
    LOAD_CAUSE_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_STDOUT_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_STDERR_FIELD_NUMBER: _ClassVar[int]
    WALL_TIME_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedCompositeFieldContainer[TestOutcome]
    load_error: str
    load_cause: TestCause
    candidate_stdout: bytes
    candidate_stderr: bytes
    wall_time: _duration_pb2.Duration
    def __init__(self, outcomes: _Optional[_Iterable[_Union[TestOutcome, _Mapping]]] = ..., load_error: _Optional[str] = ..., load_cause: _Optional[_Union[TestCause, str]] = ..., candidate_stdout: _Optional[bytes] = ..., candidate_stderr: _Optional[bytes] = ..., wall_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...
