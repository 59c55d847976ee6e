"""Fixtures for the tests against a real sidecar (run them through ../test.sh, which
starts a control plane and sidecars with ../../tests/harness/with-sidecar.sh)."""

from __future__ import annotations

import os
import ssl
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator

import pytest

import safewrite_client as sw

#: The CEL increment of a counter ConfigMap made by the `counter` fixture.
INCREMENT = '{"data": {"n": string(int(object.data.n) + 1)}}'


@pytest.fixture
def addr() -> str:
    value = os.environ.get("SAFEWRITE_ADDRESS")
    if not value:
        pytest.skip("SAFEWRITE_ADDRESS is unset: run through test.sh")
    return value


@pytest.fixture
def namespace(addr: str) -> str:
    return os.environ["SAFEWRITE_NAMESPACE"]


@pytest.fixture
def client(addr: str) -> Iterator[sw.Client]:
    with sw.Client(addr, timeout=60) as c:
        yield c


@pytest.fixture
def new_name(request: pytest.FixtureRequest) -> Callable[[], str]:
    """Returns a function making a fresh DNS-1123 name for the running test."""
    stem = request.node.name.replace("_", "-").lower()
    stem = "".join(ch for ch in stem if ch.isalnum() or ch == "-")[:40].strip("-")

    def make() -> str:
        return "py-%s-%s" % (stem, uuid.uuid4().hex[:8])

    return make


@pytest.fixture
def configmap_ref(namespace: str, new_name: Callable[[], str]) -> sw.ObjectRef:
    """A reference to a ConfigMap that does not exist yet."""
    return sw.ObjectRef("v1", "ConfigMap", namespace, new_name())


@pytest.fixture
def counter(client: sw.Client, configmap_ref: sw.ObjectRef) -> sw.ObjectRef:
    """A ConfigMap {"data": {"n": "0"}}, created through the sidecar."""
    result = client.update(
        configmap_ref, sw.merge_patch({"data": {"n": "0"}}), create_if_missing={"data": {"n": "0"}}
    )
    assert result.outcome == sw.Outcome.CREATED
    return configmap_ref


@pytest.fixture
def widget(
    client: sw.Client, namespace: str, new_name: Callable[[], str]
) -> sw.ObjectRef:
    """A Widget (widgets.test.safewrite.dev/v1, with a status subresource) whose status
    is {"count": 0}."""
    ref = sw.ObjectRef("test.safewrite.dev/v1", "Widget", namespace, new_name())
    created = client.update(
        ref, sw.merge_patch({"spec": {"size": 1}}), create_if_missing={"spec": {"size": 1}}
    )
    assert created.outcome == sw.Outcome.CREATED
    status = client.patch_status(ref, sw.merge_patch({"status": {"count": 0}}))
    assert status.outcome == sw.Outcome.UPDATED
    return ref


@pytest.fixture
def read(client: sw.Client) -> Callable[[sw.ObjectRef], Dict[str, Any]]:
    """Returns a function reading an object as it is now (an empty merge patch changes
    nothing and answers with the object as read)."""

    def read_(ref: sw.ObjectRef) -> Dict[str, Any]:
        result = client.update(ref, sw.merge_patch({}))
        assert result.outcome == sw.Outcome.UNCHANGED
        return result.object

    return read_


@pytest.fixture
def control_plane(addr: str) -> Dict[str, str]:
    """The control plane's env file (SERVER, ADMIN_TOKEN, CA_FILE) as a dict."""
    env: Dict[str, str] = {}
    for line in Path(os.environ["SAFEWRITE_CP_ENV"]).read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            env[key.strip()] = value.strip().strip("'\"")
    return env


@pytest.fixture
def delete_configmap(control_plane: Dict[str, str]) -> Callable[[sw.ObjectRef], None]:
    """Returns a function deleting a ConfigMap with the API server itself (the sidecar
    does not delete): an object with finalizers then stays, being deleted."""

    def delete(ref: sw.ObjectRef) -> None:
        url = "%s/api/v1/namespaces/%s/configmaps/%s" % (control_plane["SERVER"], ref.namespace, ref.name)
        request = urllib.request.Request(
            url, method="DELETE", headers={"Authorization": "Bearer " + control_plane["ADMIN_TOKEN"]}
        )
        context = ssl.create_default_context(cafile=control_plane["CA_FILE"])
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:
            assert answer.status in (200, 202), answer.status

    return delete


@pytest.fixture
def tracer() -> Any:
    """An OpenTelemetry SDK tracer of its own TracerProvider (the global one is left
    alone): its spans become the current span, which the client propagates."""
    sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
    return sdk_trace.TracerProvider().get_tracer("safewrite-tests")


def capabilities_of(version: str = sw.__version__, lacking: Iterable[str] = ()) -> Any:
    """The ``CapabilitiesResponse`` of a sidecar of ``version`` that has every RPC,
    field and enum value of this client's proto but those named in ``lacking``: what
    the fake WriterServices of the offline tests answer (a fake that answered
    UNIMPLEMENTED would be a sidecar older than 0.2.0, and the client would refuse
    Lead, Delete and fences before sending them)."""
    from safewrite_client.v1 import writer_pb2

    skip = set(lacking)
    response = writer_pb2.CapabilitiesResponse(version=version)

    def enums(types: Any) -> None:
        for enum in types:
            response.enum_values.extend(
                n for n in ("%s.%s" % (enum.full_name, v.name) for v in enum.values) if n not in skip
            )

    def messages(types: Any) -> None:
        for message in types:
            response.fields.extend(f.full_name for f in message.fields if f.full_name not in skip)
            enums(message.enum_types)
            messages(message.nested_types)

    for service in writer_pb2.DESCRIPTOR.services_by_name.values():
        response.methods.extend(
            n for n in ("%s/%s" % (service.full_name, m.name) for m in service.methods) if n not in skip
        )
    enums(writer_pb2.DESCRIPTOR.enum_types_by_name.values())
    messages(writer_pb2.DESCRIPTOR.message_types_by_name.values())
    return response
