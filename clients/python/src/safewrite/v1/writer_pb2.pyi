import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_UNSPECIFIED: _ClassVar[Outcome]
    OUTCOME_UPDATED: _ClassVar[Outcome]
    OUTCOME_UNCHANGED: _ClassVar[Outcome]
    OUTCOME_CREATED: _ClassVar[Outcome]
    OUTCOME_ABORTED: _ClassVar[Outcome]
OUTCOME_UNSPECIFIED: Outcome
OUTCOME_UPDATED: Outcome
OUTCOME_UNCHANGED: Outcome
OUTCOME_CREATED: Outcome
OUTCOME_ABORTED: Outcome

class UpdateWithRetryRequest(_message.Message):
    __slots__ = ("target", "mutation", "preconditions", "retry_policy", "options")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    MUTATION_FIELD_NUMBER: _ClassVar[int]
    PRECONDITIONS_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    target: ObjectRef
    mutation: Mutation
    preconditions: Preconditions
    retry_policy: RetryPolicy
    options: WriteOptions
    def __init__(self, target: _Optional[_Union[ObjectRef, _Mapping]] = ..., mutation: _Optional[_Union[Mutation, _Mapping]] = ..., preconditions: _Optional[_Union[Preconditions, _Mapping]] = ..., retry_policy: _Optional[_Union[RetryPolicy, _Mapping]] = ..., options: _Optional[_Union[WriteOptions, _Mapping]] = ...) -> None: ...

class UpdateWithRetryResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: WriteResult
    def __init__(self, result: _Optional[_Union[WriteResult, _Mapping]] = ...) -> None: ...

class PatchStatusRequest(_message.Message):
    __slots__ = ("target", "mutation", "preconditions", "retry_policy", "options")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    MUTATION_FIELD_NUMBER: _ClassVar[int]
    PRECONDITIONS_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    target: ObjectRef
    mutation: Mutation
    preconditions: Preconditions
    retry_policy: RetryPolicy
    options: WriteOptions
    def __init__(self, target: _Optional[_Union[ObjectRef, _Mapping]] = ..., mutation: _Optional[_Union[Mutation, _Mapping]] = ..., preconditions: _Optional[_Union[Preconditions, _Mapping]] = ..., retry_policy: _Optional[_Union[RetryPolicy, _Mapping]] = ..., options: _Optional[_Union[WriteOptions, _Mapping]] = ...) -> None: ...

class PatchStatusResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: WriteResult
    def __init__(self, result: _Optional[_Union[WriteResult, _Mapping]] = ...) -> None: ...

class TransactRequest(_message.Message):
    __slots__ = ("begin", "proposal")
    BEGIN_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_FIELD_NUMBER: _ClassVar[int]
    begin: TransactBegin
    proposal: TransactProposal
    def __init__(self, begin: _Optional[_Union[TransactBegin, _Mapping]] = ..., proposal: _Optional[_Union[TransactProposal, _Mapping]] = ...) -> None: ...

class TransactBegin(_message.Message):
    __slots__ = ("target", "status", "preconditions", "retry_policy", "options")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PRECONDITIONS_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    target: ObjectRef
    status: bool
    preconditions: Preconditions
    retry_policy: RetryPolicy
    options: WriteOptions
    def __init__(self, target: _Optional[_Union[ObjectRef, _Mapping]] = ..., status: bool = ..., preconditions: _Optional[_Union[Preconditions, _Mapping]] = ..., retry_policy: _Optional[_Union[RetryPolicy, _Mapping]] = ..., options: _Optional[_Union[WriteOptions, _Mapping]] = ...) -> None: ...

class TransactProposal(_message.Message):
    __slots__ = ("attempt", "object_json", "mutation", "abort")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    OBJECT_JSON_FIELD_NUMBER: _ClassVar[int]
    MUTATION_FIELD_NUMBER: _ClassVar[int]
    ABORT_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    object_json: str
    mutation: Mutation
    abort: TransactAbort
    def __init__(self, attempt: _Optional[int] = ..., object_json: _Optional[str] = ..., mutation: _Optional[_Union[Mutation, _Mapping]] = ..., abort: _Optional[_Union[TransactAbort, _Mapping]] = ...) -> None: ...

class TransactAbort(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class TransactResponse(_message.Message):
    __slots__ = ("fresh", "result")
    FRESH_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    fresh: FreshObject
    result: WriteResult
    def __init__(self, fresh: _Optional[_Union[FreshObject, _Mapping]] = ..., result: _Optional[_Union[WriteResult, _Mapping]] = ...) -> None: ...

class FreshObject(_message.Message):
    __slots__ = ("attempt", "object_json", "resource_version", "creating")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    OBJECT_JSON_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATING_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    object_json: str
    resource_version: str
    creating: bool
    def __init__(self, attempt: _Optional[int] = ..., object_json: _Optional[str] = ..., resource_version: _Optional[str] = ..., creating: bool = ...) -> None: ...

class ObjectRef(_message.Message):
    __slots__ = ("api_version", "kind", "namespace", "name")
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    api_version: str
    kind: str
    namespace: str
    name: str
    def __init__(self, api_version: _Optional[str] = ..., kind: _Optional[str] = ..., namespace: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class Mutation(_message.Message):
    __slots__ = ("json_patch", "merge_patch", "apply", "cel")
    JSON_PATCH_FIELD_NUMBER: _ClassVar[int]
    MERGE_PATCH_FIELD_NUMBER: _ClassVar[int]
    APPLY_FIELD_NUMBER: _ClassVar[int]
    CEL_FIELD_NUMBER: _ClassVar[int]
    json_patch: JsonPatch
    merge_patch: MergePatch
    apply: ServerSideApply
    cel: CelMutation
    def __init__(self, json_patch: _Optional[_Union[JsonPatch, _Mapping]] = ..., merge_patch: _Optional[_Union[MergePatch, _Mapping]] = ..., apply: _Optional[_Union[ServerSideApply, _Mapping]] = ..., cel: _Optional[_Union[CelMutation, _Mapping]] = ...) -> None: ...

class JsonPatch(_message.Message):
    __slots__ = ("patch_json",)
    PATCH_JSON_FIELD_NUMBER: _ClassVar[int]
    patch_json: str
    def __init__(self, patch_json: _Optional[str] = ...) -> None: ...

class MergePatch(_message.Message):
    __slots__ = ("patch_json",)
    PATCH_JSON_FIELD_NUMBER: _ClassVar[int]
    patch_json: str
    def __init__(self, patch_json: _Optional[str] = ...) -> None: ...

class ServerSideApply(_message.Message):
    __slots__ = ("configuration_json", "force")
    CONFIGURATION_JSON_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    configuration_json: str
    force: bool
    def __init__(self, configuration_json: _Optional[str] = ..., force: bool = ...) -> None: ...

class CelMutation(_message.Message):
    __slots__ = ("expression",)
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    expression: str
    def __init__(self, expression: _Optional[str] = ...) -> None: ...

class Preconditions(_message.Message):
    __slots__ = ("uid", "resource_version", "cel")
    UID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    CEL_FIELD_NUMBER: _ClassVar[int]
    uid: str
    resource_version: str
    cel: str
    def __init__(self, uid: _Optional[str] = ..., resource_version: _Optional[str] = ..., cel: _Optional[str] = ...) -> None: ...

class RetryPolicy(_message.Message):
    __slots__ = ("max_attempts", "initial_backoff", "max_backoff", "requeue")
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    REQUEUE_FIELD_NUMBER: _ClassVar[int]
    max_attempts: int
    initial_backoff: _duration_pb2.Duration
    max_backoff: _duration_pb2.Duration
    requeue: bool
    def __init__(self, max_attempts: _Optional[int] = ..., initial_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., requeue: bool = ...) -> None: ...

class WriteOptions(_message.Message):
    __slots__ = ("field_manager", "dry_run", "create_if_missing_json", "idempotency_key")
    FIELD_MANAGER_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    CREATE_IF_MISSING_JSON_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    field_manager: str
    dry_run: bool
    create_if_missing_json: str
    idempotency_key: str
    def __init__(self, field_manager: _Optional[str] = ..., dry_run: bool = ..., create_if_missing_json: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class WriteResult(_message.Message):
    __slots__ = ("outcome", "object_json", "resource_version", "attempts", "attempt_records", "trace_id", "already_applied")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    OBJECT_JSON_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_RECORDS_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    ALREADY_APPLIED_FIELD_NUMBER: _ClassVar[int]
    outcome: Outcome
    object_json: str
    resource_version: str
    attempts: int
    attempt_records: _containers.RepeatedCompositeFieldContainer[AttemptRecord]
    trace_id: str
    already_applied: bool
    def __init__(self, outcome: _Optional[_Union[Outcome, str]] = ..., object_json: _Optional[str] = ..., resource_version: _Optional[str] = ..., attempts: _Optional[int] = ..., attempt_records: _Optional[_Iterable[_Union[AttemptRecord, _Mapping]]] = ..., trace_id: _Optional[str] = ..., already_applied: bool = ...) -> None: ...

class AttemptRecord(_message.Message):
    __slots__ = ("number", "resource_version_read", "http_status", "reason", "backoff")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_READ_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_FIELD_NUMBER: _ClassVar[int]
    number: int
    resource_version_read: str
    http_status: int
    reason: str
    backoff: _duration_pb2.Duration
    def __init__(self, number: _Optional[int] = ..., resource_version_read: _Optional[str] = ..., http_status: _Optional[int] = ..., reason: _Optional[str] = ..., backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class WriteFailure(_message.Message):
    __slots__ = ("attempt_records", "current_object_json", "trace_id")
    ATTEMPT_RECORDS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_OBJECT_JSON_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    attempt_records: _containers.RepeatedCompositeFieldContainer[AttemptRecord]
    current_object_json: str
    trace_id: str
    def __init__(self, attempt_records: _Optional[_Iterable[_Union[AttemptRecord, _Mapping]]] = ..., current_object_json: _Optional[str] = ..., trace_id: _Optional[str] = ...) -> None: ...
