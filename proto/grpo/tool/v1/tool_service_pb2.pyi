import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CallStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CALL_STATUS_UNSPECIFIED: _ClassVar[CallStatus]
    CALL_STATUS_OK: _ClassVar[CallStatus]
    CALL_STATUS_UNAVAILABLE: _ClassVar[CallStatus]
    CALL_STATUS_INTERNAL: _ClassVar[CallStatus]
CALL_STATUS_UNSPECIFIED: CallStatus
CALL_STATUS_OK: CallStatus
CALL_STATUS_UNAVAILABLE: CallStatus
CALL_STATUS_INTERNAL: CallStatus

class ListToolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ToolLimits(_message.Message):
    __slots__ = ("max_wall_time", "max_output_bytes")
    MAX_WALL_TIME_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    max_wall_time: _duration_pb2.Duration
    max_output_bytes: int
    def __init__(self, max_wall_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_output_bytes: _Optional[int] = ...) -> None: ...

class Tool(_message.Message):
    __slots__ = ("name", "description", "parameters_json_schema", "limits", "stateful")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    STATEFUL_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters_json_schema: str
    limits: ToolLimits
    stateful: bool
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json_schema: _Optional[str] = ..., limits: _Optional[_Union[ToolLimits, _Mapping]] = ..., stateful: _Optional[bool] = ...) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools", "server_version", "max_calls_per_request")
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_CALLS_PER_REQUEST_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    server_version: str
    max_calls_per_request: int
    def __init__(self, tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., server_version: _Optional[str] = ..., max_calls_per_request: _Optional[int] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("call_id", "name", "arguments_json", "session_id")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    name: str
    arguments_json: str
    session_id: str
    def __init__(self, call_id: _Optional[str] = ..., name: _Optional[str] = ..., arguments_json: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class ExecuteToolsRequest(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    def __init__(self, calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ...) -> None: ...

class ToolResult(_message.Message):
    __slots__ = ("call_id", "status", "output", "error_kind", "truncated", "duration", "detail")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_KIND_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    status: CallStatus
    output: str
    error_kind: str
    truncated: bool
    duration: _duration_pb2.Duration
    detail: str
    def __init__(self, call_id: _Optional[str] = ..., status: _Optional[_Union[CallStatus, str]] = ..., output: _Optional[str] = ..., error_kind: _Optional[str] = ..., truncated: _Optional[bool] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., detail: _Optional[str] = ...) -> None: ...

class ExecuteToolsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ToolResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ToolResult, _Mapping]]] = ...) -> None: ...

class EndSessionsRequest(_message.Message):
    __slots__ = ("session_ids",)
    SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    session_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, session_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class EndSessionsResponse(_message.Message):
    __slots__ = ("ended",)
    ENDED_FIELD_NUMBER: _ClassVar[int]
    ended: int
    def __init__(self, ended: _Optional[int] = ...) -> None: ...
