"""Propagation of the caller's OpenTelemetry context to the sidecar.

When ``opentelemetry-api`` is importable, each call carries the current context as gRPC
metadata, written by the global propagator (``opentelemetry.propagate.inject``; by
default W3C ``traceparent``, ``tracestate`` and ``baggage``), so the sidecar's RPC span
becomes a child of the caller's span. Without it nothing extra is sent. Propagation
never fails a call: a propagator that raises, or writes a header gRPC cannot carry, is
skipped.
"""

from __future__ import annotations

import logging
import re
from typing import Callable, Dict, Optional, Tuple

#: Writes the current context into a carrier dict (``opentelemetry.propagate.inject``).
Injector = Callable[[Dict[str, str]], None]

#: gRPC metadata as the stubs take it.
Metadata = Tuple[Tuple[str, str], ...]

_log = logging.getLogger("safewrite")

# An ASCII metadata key gRPC accepts (lower case); "-bin" keys would need bytes, and
# "grpc-" keys are reserved for gRPC itself.
_KEY = re.compile(r"^[0-9a-z_.-]+$")


def load_injector() -> Optional[Injector]:
    """``opentelemetry.propagate.inject``, or None when ``opentelemetry-api`` is not
    importable (or fails to import)."""
    try:
        from opentelemetry.propagate import inject
    except Exception:  # not installed, or a broken installation: send nothing extra
        return None
    injector: Injector = inject
    return injector


def _valid(key: str, value: str) -> bool:
    return (
        bool(_KEY.match(key))
        and not key.endswith("-bin")
        and not key.startswith("grpc-")
        and value.isascii()
        and value.isprintable()
    )


def trace_metadata(injector: Optional[Injector]) -> Optional[Metadata]:
    """The current OpenTelemetry context as gRPC metadata, or None when there is
    nothing to send (no injector, or the propagator wrote nothing usable)."""
    if injector is None:
        return None
    carrier: Dict[str, str] = {}
    try:
        injector(carrier)
    except Exception:
        _log.debug("safewrite: could not inject the OpenTelemetry context", exc_info=True)
        return None
    pairs = []
    for key, value in carrier.items():
        if not isinstance(key, str) or not isinstance(value, str):
            continue
        key = key.lower()
        if _valid(key, value):
            pairs.append((key, value))
        else:
            _log.debug("safewrite: not propagating the %r header gRPC cannot carry", key)
    return tuple(pairs) or None
