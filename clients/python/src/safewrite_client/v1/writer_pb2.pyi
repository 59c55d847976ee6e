from google.protobuf import descriptor_pb2 as _descriptor_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DELETE_OUTCOME_DELETED: DeleteOutcome
DELETE_OUTCOME_DELETING: DeleteOutcome
DELETE_OUTCOME_GONE: DeleteOutcome
DELETE_OUTCOME_UNSPECIFIED: DeleteOutcome
DESCRIPTOR: _descriptor.FileDescriptor
LEAD_STATE_LEADING: LeadState
LEAD_STATE_NOT_LEADING: LeadState
LEAD_STATE_UNSPECIFIED: LeadState
METHOD_SINCE_FIELD_NUMBER: _ClassVar[int]
NOT_LEADING_REASON_LOST_RENEWAL: NotLeadingReason
NOT_LEADING_REASON_OTHER_HOLDER: NotLeadingReason
NOT_LEADING_REASON_RELEASED: NotLeadingReason
NOT_LEADING_REASON_UNSPECIFIED: NotLeadingReason
OUTCOME_ABORTED: Outcome
OUTCOME_CREATED: Outcome
OUTCOME_GONE: Outcome
OUTCOME_UNCHANGED: Outcome
OUTCOME_UNSPECIFIED: Outcome
OUTCOME_UPDATED: Outcome
PROPAGATION_POLICY_BACKGROUND: PropagationPolicy
PROPAGATION_POLICY_FOREGROUND: PropagationPolicy
PROPAGATION_POLICY_ORPHAN: PropagationPolicy
PROPAGATION_POLICY_UNSPECIFIED: PropagationPolicy
REASON_ALREADY_OWNED: Reason
REASON_API_SERVER: Reason
REASON_API_SERVER_UNREACHABLE: Reason
REASON_BAD_ANSWER: Reason
REASON_CEL_BUSY: Reason
REASON_CIRCUIT_OPEN: Reason
REASON_DEADLINE_EXCEEDED: Reason
REASON_FENCED: Reason
REASON_FIELD_MANAGER_CONFLICT: Reason
REASON_INVALID_CEL: Reason
REASON_INVALID_REQUEST: Reason
REASON_MALFORMED_REQUEST: Reason
REASON_MUTATION_DOES_NOT_APPLY: Reason
REASON_NOT_LEADER: Reason
REASON_OBJECT_DELETING: Reason
REASON_OVERLOADED: Reason
REASON_POLICY_DENIED: Reason
REASON_PRECONDITION_FAILED: Reason
REASON_RATE_LIMITED: Reason
REASON_REQUEST_NOT_READ: Reason
REASON_REQUEST_TOO_LARGE: Reason
REASON_RESOURCE_VERSION_MISMATCH: Reason
REASON_RESOURCE_VERSION_TOO_LARGE: Reason
REASON_RETRY_BUDGET_EXHAUSTED: Reason
REASON_TOKEN_INVALID: Reason
REASON_TOKEN_REQUIRED: Reason
REASON_TRANSACTION_CANCELLED: Reason
REASON_TRANSACTION_IDLE: Reason
REASON_UNIMPLEMENTED: Reason
REASON_UNKNOWN_FIELD: Reason
REASON_UNKNOWN_KIND: Reason
REASON_UNSPECIFIED: Reason
REASON_WRITE_OUTCOME_UNKNOWN: Reason
RETRY_BY_CODE: Retry
RETRY_BY_CODE_FIELD_NUMBER: _ClassVar[int]
RETRY_FIELD_NUMBER: _ClassVar[int]
RETRY_LATER: Retry
RETRY_NEVER: Retry
RETRY_UNSPECIFIED: Retry
RETRY_WITH_IDEMPOTENCY_KEY: Retry
SINCE_FIELD_NUMBER: _ClassVar[int]
VALUE_SINCE_FIELD_NUMBER: _ClassVar[int]
method_since: _descriptor.FieldDescriptor
retry: _descriptor.FieldDescriptor
retry_by_code: _descriptor.FieldDescriptor
since: _descriptor.FieldDescriptor
value_since: _descriptor.FieldDescriptor

class AttemptRecord(_message.Message):
    __slots__ = ["backoff", "batch_size", "http_status", "number", "reason", "resource_version_read"]
    BACKOFF_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_READ_FIELD_NUMBER: _ClassVar[int]
    backoff: _duration_pb2.Duration
    batch_size: int
    http_status: int
    number: int
    reason: str
    resource_version_read: str
    def __init__(self, number: _Optional[int] = ..., resource_version_read: _Optional[str] = ..., http_status: _Optional[int] = ..., reason: _Optional[str] = ..., backoff: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., batch_size: _Optional[int] = ...) -> None: ...

class CapabilitiesRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class CapabilitiesResponse(_message.Message):
    __slots__ = ["enum_values", "fields", "methods", "version"]
    ENUM_VALUES_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    METHODS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    enum_values: _containers.RepeatedScalarFieldContainer[str]
    fields: _containers.RepeatedScalarFieldContainer[str]
    methods: _containers.RepeatedScalarFieldContainer[str]
    version: str
    def __init__(self, version: _Optional[str] = ..., methods: _Optional[_Iterable[str]] = ..., fields: _Optional[_Iterable[str]] = ..., enum_values: _Optional[_Iterable[str]] = ...) -> None: ...

class CelMutation(_message.Message):
    __slots__ = ["expression"]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    expression: str
    def __init__(self, expression: _Optional[str] = ...) -> None: ...

class Condition(_message.Message):
    __slots__ = ["last_transition_time", "message", "observed_generation", "reason", "status", "type"]
    LAST_TRANSITION_TIME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_GENERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    last_transition_time: str
    message: str
    observed_generation: int
    reason: str
    status: str
    type: str
    def __init__(self, type: _Optional[str] = ..., status: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., observed_generation: _Optional[int] = ..., last_transition_time: _Optional[str] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ["dry_run", "fence", "preconditions", "propagation_policy", "retry_policy", "target"]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    PRECONDITIONS_FIELD_NUMBER: _ClassVar[int]
    PROPAGATION_POLICY_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    dry_run: bool
    fence: Fence
    preconditions: Preconditions
    propagation_policy: PropagationPolicy
    retry_policy: RetryPolicy
    target: ObjectRef
    def __init__(self, target: _Optional[_Union[ObjectRef, _Mapping]] = ..., preconditions: _Optional[_Union[Preconditions, _Mapping]] = ..., propagation_policy: _Optional[_Union[PropagationPolicy, str]] = ..., dry_run: bool = ..., retry_policy: _Optional[_Union[RetryPolicy, _Mapping]] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ["attempt_records", "attempts", "deletion_timestamp", "object_json", "outcome", "trace_id"]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_RECORDS_FIELD_NUMBER: _ClassVar[int]
    DELETION_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    OBJECT_JSON_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    attempt_records: _containers.RepeatedCompositeFieldContainer[AttemptRecord]
    attempts: int
    deletion_timestamp: str
    object_json: str
    outcome: DeleteOutcome
    trace_id: str
    def __init__(self, outcome: _Optional[_Union[DeleteOutcome, str]] = ..., object_json: _Optional[str] = ..., deletion_timestamp: _Optional[str] = ..., attempts: _Optional[int] = ..., attempt_records: _Optional[_Iterable[_Union[AttemptRecord, _Mapping]]] = ..., trace_id: _Optional[str] = ...) -> None: ...

class Fence(_message.Message):
    __slots__ = ["epoch", "lease_name", "lease_namespace"]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEASE_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    LEASE_NAME_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    lease_name: str
    lease_namespace: str
    def __init__(self, lease_namespace: _Optional[str] = ..., lease_name: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class FinalizerChange(_message.Message):
    __slots__ = ["finalizer", "remove"]
    FINALIZER_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    finalizer: str
    remove: bool
    def __init__(self, finalizer: _Optional[str] = ..., remove: bool = ...) -> None: ...

class FreshObject(_message.Message):
    __slots__ = ["attempt", "creating", "object_json", "resource_version"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CREATING_FIELD_NUMBER: _ClassVar[int]
    OBJECT_JSON_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    creating: bool
    object_json: str
    resource_version: str
    def __init__(self, attempt: _Optional[int] = ..., object_json: _Optional[str] = ..., resource_version: _Optional[str] = ..., creating: bool = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ["min_resource_version", "target"]
    MIN_RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    min_resource_version: str
    target: ObjectRef
    def __init__(self, target: _Optional[_Union[ObjectRef, _Mapping]] = ..., min_resource_version: _Optional[str] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ["object_json", "remembered", "resource_version", "trace_id"]
    OBJECT_JSON_FIELD_NUMBER: _ClassVar[int]
    REMEMBERED_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    object_json: str
    remembered: bool
    resource_version: str
    trace_id: str
    def __init__(self, object_json: _Optional[str] = ..., resource_version: _Optional[str] = ..., remembered: bool = ..., trace_id: _Optional[str] = ...) -> None: ...

class JsonPatch(_message.Message):
    __slots__ = ["patch_json"]
    PATCH_JSON_FIELD_NUMBER: _ClassVar[int]
    patch_json: str
    def __init__(self, patch_json: _Optional[str] = ...) -> None: ...

class LeadRequest(_message.Message):
    __slots__ = ["identity", "lease_duration", "name", "namespace", "renew_deadline", "retry_period"]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    LEASE_DURATION_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RENEW_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    RETRY_PERIOD_FIELD_NUMBER: _ClassVar[int]
    identity: str
    lease_duration: _duration_pb2.Duration
    name: str
    namespace: str
    renew_deadline: _duration_pb2.Duration
    retry_period: _duration_pb2.Duration
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ..., identity: _Optional[str] = ..., lease_duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., renew_deadline: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., retry_period: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class LeadResponse(_message.Message):
    __slots__ = ["epoch", "holder", "identity", "reason", "state"]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    holder: str
    identity: str
    reason: NotLeadingReason
    state: LeadState
    def __init__(self, state: _Optional[_Union[LeadState, str]] = ..., epoch: _Optional[int] = ..., holder: _Optional[str] = ..., reason: _Optional[_Union[NotLeadingReason, str]] = ..., identity: _Optional[str] = ...) -> None: ...

class ListEntryChange(_message.Message):
    __slots__ = ["entry_json", "keys", "path", "remove"]
    ENTRY_JSON_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    entry_json: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    path: str
    remove: bool
    def __init__(self, path: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., entry_json: _Optional[str] = ..., remove: bool = ...) -> None: ...

class MergePatch(_message.Message):
    __slots__ = ["patch_json"]
    PATCH_JSON_FIELD_NUMBER: _ClassVar[int]
    patch_json: str
    def __init__(self, patch_json: _Optional[str] = ...) -> None: ...

class Mutation(_message.Message):
    __slots__ = ["apply", "cel", "finalizer", "json_patch", "list_entry", "merge_patch", "owner_reference", "remove_condition", "set_condition"]
    APPLY_FIELD_NUMBER: _ClassVar[int]
    CEL_FIELD_NUMBER: _ClassVar[int]
    FINALIZER_FIELD_NUMBER: _ClassVar[int]
    JSON_PATCH_FIELD_NUMBER: _ClassVar[int]
    LIST_ENTRY_FIELD_NUMBER: _ClassVar[int]
    MERGE_PATCH_FIELD_NUMBER: _ClassVar[int]
    OWNER_REFERENCE_FIELD_NUMBER: _ClassVar[int]
    REMOVE_CONDITION_FIELD_NUMBER: _ClassVar[int]
    SET_CONDITION_FIELD_NUMBER: _ClassVar[int]
    apply: ServerSideApply
    cel: CelMutation
    finalizer: FinalizerChange
    json_patch: JsonPatch
    list_entry: ListEntryChange
    merge_patch: MergePatch
    owner_reference: OwnerReferenceChange
    remove_condition: RemoveCondition
    set_condition: SetCondition
    def __init__(self, json_patch: _Optional[_Union[JsonPatch, _Mapping]] = ..., merge_patch: _Optional[_Union[MergePatch, _Mapping]] = ..., apply: _Optional[_Union[ServerSideApply, _Mapping]] = ..., cel: _Optional[_Union[CelMutation, _Mapping]] = ..., set_condition: _Optional[_Union[SetCondition, _Mapping]] = ..., remove_condition: _Optional[_Union[RemoveCondition, _Mapping]] = ..., finalizer: _Optional[_Union[FinalizerChange, _Mapping]] = ..., owner_reference: _Optional[_Union[OwnerReferenceChange, _Mapping]] = ..., list_entry: _Optional[_Union[ListEntryChange, _Mapping]] = ...) -> None: ...

class ObjectRef(_message.Message):
    __slots__ = ["api_version", "kind", "name", "namespace"]
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    api_version: str
    kind: str
    name: str
    namespace: str
    def __init__(self, api_version: _Optional[str] = ..., kind: _Optional[str] = ..., namespace: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class OwnerReference(_message.Message):
    __slots__ = ["api_version", "block_owner_deletion", "controller", "kind", "name", "uid"]
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    BLOCK_OWNER_DELETION_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    api_version: str
    block_owner_deletion: bool
    controller: bool
    kind: str
    name: str
    uid: str
    def __init__(self, api_version: _Optional[str] = ..., kind: _Optional[str] = ..., name: _Optional[str] = ..., uid: _Optional[str] = ..., controller: bool = ..., block_owner_deletion: bool = ...) -> None: ...

class OwnerReferenceChange(_message.Message):
    __slots__ = ["owner", "remove"]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    owner: OwnerReference
    remove: bool
    def __init__(self, owner: _Optional[_Union[OwnerReference, _Mapping]] = ..., remove: bool = ...) -> None: ...

class PatchStatusRequest(_message.Message):
    __slots__ = ["mutation", "options", "preconditions", "retry_policy", "target"]
    MUTATION_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    PRECONDITIONS_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    mutation: Mutation
    options: WriteOptions
    preconditions: Preconditions
    retry_policy: RetryPolicy
    target: ObjectRef
    def __init__(self, target: _Optional[_Union[ObjectRef, _Mapping]] = ..., mutation: _Optional[_Union[Mutation, _Mapping]] = ..., preconditions: _Optional[_Union[Preconditions, _Mapping]] = ..., retry_policy: _Optional[_Union[RetryPolicy, _Mapping]] = ..., options: _Optional[_Union[WriteOptions, _Mapping]] = ...) -> None: ...

class PatchStatusResponse(_message.Message):
    __slots__ = ["result"]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: WriteResult
    def __init__(self, result: _Optional[_Union[WriteResult, _Mapping]] = ...) -> None: ...

class Preconditions(_message.Message):
    __slots__ = ["cel", "resource_version", "uid"]
    CEL_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    cel: str
    resource_version: str
    uid: str
    def __init__(self, uid: _Optional[str] = ..., resource_version: _Optional[str] = ..., cel: _Optional[str] = ...) -> None: ...

class RemoveCondition(_message.Message):
    __slots__ = ["path", "types"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    path: str
    types: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, types: _Optional[_Iterable[str]] = ..., path: _Optional[str] = ...) -> None: ...

class RetryByCode(_message.Message):
    __slots__ = ["later", "with_idempotency_key"]
    LATER_FIELD_NUMBER: _ClassVar[int]
    WITH_IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    later: _containers.RepeatedScalarFieldContainer[int]
    with_idempotency_key: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, with_idempotency_key: _Optional[_Iterable[int]] = ..., later: _Optional[_Iterable[int]] = ...) -> None: ...

class RetryPolicy(_message.Message):
    __slots__ = ["initial_backoff", "max_attempts", "max_backoff", "requeue"]
    INITIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    REQUEUE_FIELD_NUMBER: _ClassVar[int]
    initial_backoff: _duration_pb2.Duration
    max_attempts: int
    max_backoff: _duration_pb2.Duration
    requeue: bool
    def __init__(self, max_attempts: _Optional[int] = ..., initial_backoff: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., max_backoff: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., requeue: bool = ...) -> None: ...

class ServerSideApply(_message.Message):
    __slots__ = ["configuration_json", "force"]
    CONFIGURATION_JSON_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    configuration_json: str
    force: bool
    def __init__(self, configuration_json: _Optional[str] = ..., force: bool = ...) -> None: ...

class SetCondition(_message.Message):
    __slots__ = ["conditions", "path"]
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    conditions: _containers.RepeatedCompositeFieldContainer[Condition]
    path: str
    def __init__(self, conditions: _Optional[_Iterable[_Union[Condition, _Mapping]]] = ..., path: _Optional[str] = ...) -> None: ...

class TransactAbort(_message.Message):
    __slots__ = ["reason"]
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class TransactBegin(_message.Message):
    __slots__ = ["options", "preconditions", "retry_policy", "status", "target"]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    PRECONDITIONS_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    options: WriteOptions
    preconditions: Preconditions
    retry_policy: RetryPolicy
    status: bool
    target: ObjectRef
    def __init__(self, target: _Optional[_Union[ObjectRef, _Mapping]] = ..., status: bool = ..., preconditions: _Optional[_Union[Preconditions, _Mapping]] = ..., retry_policy: _Optional[_Union[RetryPolicy, _Mapping]] = ..., options: _Optional[_Union[WriteOptions, _Mapping]] = ...) -> None: ...

class TransactProposal(_message.Message):
    __slots__ = ["abort", "attempt", "mutation", "object_json"]
    ABORT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MUTATION_FIELD_NUMBER: _ClassVar[int]
    OBJECT_JSON_FIELD_NUMBER: _ClassVar[int]
    abort: TransactAbort
    attempt: int
    mutation: Mutation
    object_json: str
    def __init__(self, attempt: _Optional[int] = ..., object_json: _Optional[str] = ..., mutation: _Optional[_Union[Mutation, _Mapping]] = ..., abort: _Optional[_Union[TransactAbort, _Mapping]] = ...) -> None: ...

class TransactRequest(_message.Message):
    __slots__ = ["begin", "proposal"]
    BEGIN_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_FIELD_NUMBER: _ClassVar[int]
    begin: TransactBegin
    proposal: TransactProposal
    def __init__(self, begin: _Optional[_Union[TransactBegin, _Mapping]] = ..., proposal: _Optional[_Union[TransactProposal, _Mapping]] = ...) -> None: ...

class TransactResponse(_message.Message):
    __slots__ = ["fresh", "result"]
    FRESH_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    fresh: FreshObject
    result: WriteResult
    def __init__(self, fresh: _Optional[_Union[FreshObject, _Mapping]] = ..., result: _Optional[_Union[WriteResult, _Mapping]] = ...) -> None: ...

class UpdateWithRetryRequest(_message.Message):
    __slots__ = ["mutation", "options", "preconditions", "retry_policy", "target"]
    MUTATION_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    PRECONDITIONS_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    mutation: Mutation
    options: WriteOptions
    preconditions: Preconditions
    retry_policy: RetryPolicy
    target: ObjectRef
    def __init__(self, target: _Optional[_Union[ObjectRef, _Mapping]] = ..., mutation: _Optional[_Union[Mutation, _Mapping]] = ..., preconditions: _Optional[_Union[Preconditions, _Mapping]] = ..., retry_policy: _Optional[_Union[RetryPolicy, _Mapping]] = ..., options: _Optional[_Union[WriteOptions, _Mapping]] = ...) -> None: ...

class UpdateWithRetryResponse(_message.Message):
    __slots__ = ["result"]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: WriteResult
    def __init__(self, result: _Optional[_Union[WriteResult, _Mapping]] = ...) -> None: ...

class WriteFailure(_message.Message):
    __slots__ = ["attempt_records", "current_object_json", "reason", "trace_id"]
    ATTEMPT_RECORDS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_OBJECT_JSON_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    attempt_records: _containers.RepeatedCompositeFieldContainer[AttemptRecord]
    current_object_json: str
    reason: Reason
    trace_id: str
    def __init__(self, attempt_records: _Optional[_Iterable[_Union[AttemptRecord, _Mapping]]] = ..., current_object_json: _Optional[str] = ..., trace_id: _Optional[str] = ..., reason: _Optional[_Union[Reason, str]] = ...) -> None: ...

class WriteOptions(_message.Message):
    __slots__ = ["create_if_missing_json", "dry_run", "fence", "field_manager", "idempotency_key", "write_alone"]
    CREATE_IF_MISSING_JSON_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    FIELD_MANAGER_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    WRITE_ALONE_FIELD_NUMBER: _ClassVar[int]
    create_if_missing_json: str
    dry_run: bool
    fence: Fence
    field_manager: str
    idempotency_key: str
    write_alone: bool
    def __init__(self, field_manager: _Optional[str] = ..., dry_run: bool = ..., create_if_missing_json: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., write_alone: bool = ..., fence: _Optional[_Union[Fence, _Mapping]] = ...) -> None: ...

class WriteResult(_message.Message):
    __slots__ = ["already_applied", "attempt_records", "attempts", "object_json", "outcome", "resource_version", "trace_id"]
    ALREADY_APPLIED_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_RECORDS_FIELD_NUMBER: _ClassVar[int]
    OBJECT_JSON_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    already_applied: bool
    attempt_records: _containers.RepeatedCompositeFieldContainer[AttemptRecord]
    attempts: int
    object_json: str
    outcome: Outcome
    resource_version: str
    trace_id: str
    def __init__(self, outcome: _Optional[_Union[Outcome, str]] = ..., object_json: _Optional[str] = ..., resource_version: _Optional[str] = ..., attempts: _Optional[int] = ..., attempt_records: _Optional[_Iterable[_Union[AttemptRecord, _Mapping]]] = ..., trace_id: _Optional[str] = ..., already_applied: bool = ...) -> None: ...

class PropagationPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class DeleteOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class LeadState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class NotLeadingReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Reason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Retry(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
