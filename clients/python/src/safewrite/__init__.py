"""Python client of safewrite, the sidecar that performs conflict-safe read-modify-write
of Kubernetes objects.

A controller sends *what* to change; safewrite reads the fresh object, applies the
change, writes it with the resourceVersion it read, and on a conflict retries from a
fresh read, within the call's timeout::

    import safewrite

    with safewrite.Client("127.0.0.1:50051") as client:
        ref = safewrite.ObjectRef("v1", "ConfigMap", "default", "counter")
        result = client.update(ref, cel='{"data": {"n": string(int(object.data.n) + 1)}}')

        def bump(obj):
            obj["data"]["n"] = str(int(obj["data"]["n"]) + 1)

        result = client.transact(ref, bump)

:class:`Client` blocks; :class:`AsyncClient` is its asyncio twin. Failures raise a
:class:`SafewriteError` subclass per gRPC status code, carrying safewrite's rich error
details. The generated protobuf and gRPC modules are in :mod:`safewrite.v1`.
"""

from ._aio import AsyncClient, AsyncTransactFn
from ._client import DEFAULT_TARGET, Client, TransactFn
from ._errors import (
    DOMAIN,
    WRITE_OUTCOME_UNKNOWN,
    CancelledError,
    ConflictError,
    DeadlineExceededError,
    InternalError,
    InvalidError,
    NotFoundError,
    OutcomeUnknownError,
    PermissionDeniedError,
    PreconditionFailedError,
    ResourceExhaustedError,
    SafewriteError,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
    error_class,
    from_rpc_error,
)
from ._types import (
    Abort,
    AttemptRecord,
    FieldViolation,
    ObjectRef,
    Outcome,
    Preconditions,
    Result,
    RetryPolicy,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_TARGET",
    "DOMAIN",
    "WRITE_OUTCOME_UNKNOWN",
    "Abort",
    "AsyncClient",
    "AsyncTransactFn",
    "AttemptRecord",
    "CancelledError",
    "Client",
    "ConflictError",
    "DeadlineExceededError",
    "FieldViolation",
    "InternalError",
    "InvalidError",
    "NotFoundError",
    "ObjectRef",
    "Outcome",
    "OutcomeUnknownError",
    "PermissionDeniedError",
    "PreconditionFailedError",
    "Preconditions",
    "ResourceExhaustedError",
    "Result",
    "RetryPolicy",
    "SafewriteError",
    "TransactFn",
    "UnauthenticatedError",
    "UnavailableError",
    "UnimplementedError",
    "__version__",
    "error_class",
    "from_rpc_error",
]
