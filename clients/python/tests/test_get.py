"""``get`` against the real sidecar: read your own writes. A get at least as new as a
write of this sidecar's is answered from its remembered copy, never older than that
write; a write it did not see (made through another sidecar) is read live; without a
minimum every get is live; errors are the writes' errors."""

from __future__ import annotations

import asyncio
import os
from typing import Callable

import pytest

import safewrite_client as sw

from conftest import INCREMENT


def test_a_get_after_a_write_is_that_write_from_the_sidecars_copy(
    client: sw.Client, counter: sw.ObjectRef
) -> None:
    written = client.update(counter, sw.cel(INCREMENT))
    read = client.get(counter, at_least=written)
    assert read.remembered is True
    assert read.resource_version == written.resource_version
    assert read.object["metadata"]["resourceVersion"] == written.resource_version
    assert read.object["data"] == {"n": "1"}
    # The same minimum as a string, and as the object the write answered with.
    by_string = client.get(counter, min_resource_version=written.resource_version)
    by_object = client.get(counter, at_least=written.object)
    assert by_string.remembered and by_object.remembered
    assert by_string.object == by_object.object == read.object


def test_an_older_minimum_gets_the_newer_state_never_an_older_one(
    client: sw.Client, counter: sw.ObjectRef
) -> None:
    first = client.update(counter, sw.cel(INCREMENT))
    second = client.update(counter, sw.cel(INCREMENT))
    read = client.get(counter, at_least=first)
    assert read.resource_version == second.resource_version
    assert read.object["data"] == {"n": "2"}


def test_a_write_the_sidecar_did_not_see_is_read_live(
    client: sw.Client, counter: sw.ObjectRef
) -> None:
    token_addr = os.environ.get("SAFEWRITE_TOKEN_ADDR")
    if not token_addr:
        pytest.skip("SAFEWRITE_TOKEN_ADDR is unset: run through test.sh")
    mine = client.update(counter, sw.cel(INCREMENT))
    with sw.Client(token_addr, timeout=60, token=os.environ["SAFEWRITE_TOKEN"]) as other:
        theirs = other.update(counter, sw.cel(INCREMENT))  # through another sidecar
    # At least as new as my own write: the copy this sidecar remembers will do.
    assert client.get(counter, at_least=mine).object["data"] == {"n": "1"}
    # At least as new as theirs, which this sidecar never saw: a live read.
    read = client.get(counter, at_least=theirs)
    assert read.remembered is False
    assert read.object["data"] == {"n": "2"}
    assert read.resource_version == theirs.resource_version
    # Without a minimum: always live.
    live = client.get(counter)
    assert live.remembered is False and live.object["data"] == {"n": "2"}


def test_get_on_the_asyncio_client(addr: str, counter: sw.ObjectRef) -> None:
    async def main() -> sw.ReadResult:
        async with sw.AsyncClient(addr, timeout=60) as client:
            written = await client.update(counter, sw.cel(INCREMENT))
            read = await client.get(counter, at_least=written)
            assert read.resource_version == written.resource_version
            return read

    read = asyncio.run(main())
    assert read.remembered is True and read.object["data"] == {"n": "1"}


def test_get_fails_as_writes_do(
    client: sw.Client, namespace: str, configmap_ref: sw.ObjectRef, new_name: Callable[[], str]
) -> None:
    with pytest.raises(sw.NotFoundError) as missing:
        client.get(configmap_ref)
    assert missing.value.reason == "NotFound" and missing.value.reason_name == "API_SERVER"
    assert missing.value.retryable is False
    secret = sw.ObjectRef("v1", "Secret", namespace, new_name())
    with pytest.raises(sw.PermissionDeniedError) as denied:
        client.get(secret)
    assert denied.value.reason == "POLICY_DENIED" and not denied.value.retryable
    with pytest.raises(sw.InvalidError) as invalid:
        client.get(configmap_ref, min_resource_version="1&watch=true")
    assert [v.field for v in invalid.value.field_violations] == ["min_resource_version"]
    assert invalid.value.reason == "INVALID_REQUEST"
