"""Idempotency keys against a real sidecar: a change sent twice with the same key is
made once, and keys are refused where they cannot work."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Callable, Dict, List

import grpc
import pytest

import safewrite_client as sw
from safewrite_client import Outcome
from safewrite_client.v1 import writer_pb2, writer_pb2_grpc

from conftest import INCREMENT

Read = Callable[[sw.ObjectRef], Dict[str, Any]]

#: The annotation in which the sidecar records the keys of the changes it made.
APPLIED_KEYS = "safewrite.dev/applied-keys"


def new_key() -> str:
    return str(uuid.uuid4())


def records_keys(obj: Dict[str, Any]) -> bool:
    """Whether the object's annotation records keys (it holds their digests)."""
    return bool(obj.get("metadata", {}).get("annotations", {}).get(APPLIED_KEYS))


def assert_refuses_key(err: sw.InvalidError) -> None:
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in err.field_violations] == ["options.idempotency_key"], err
    assert err.attempts == 0


def test_same_key_twice_updates_once(
    client: sw.Client, counter: sw.ObjectRef, read: Read
) -> None:
    key = new_key()
    first = client.update(counter, sw.cel(INCREMENT), idempotency_key=key)
    assert first.outcome == Outcome.UPDATED
    assert first.already_applied is False
    assert first.object["data"] == {"n": "1"}
    assert records_keys(first.object)

    again = client.update(counter, sw.cel(INCREMENT), idempotency_key=key)
    assert again.outcome == Outcome.UPDATED
    assert again.already_applied is True
    assert again.object["data"] == {"n": "1"}
    assert again.resource_version == first.resource_version  # nothing was written
    assert read(counter)["data"] == {"n": "1"}

    # Another key is another change.
    other = client.update(counter, sw.cel(INCREMENT), idempotency_key=new_key())
    assert other.already_applied is False
    assert other.object["data"] == {"n": "2"}
    # A call without a key never reports already_applied.
    plain = client.update(counter, sw.cel(INCREMENT))
    assert plain.already_applied is False
    assert plain.object["data"] == {"n": "3"}


def test_same_key_twice_transacts_once(
    client: sw.Client, counter: sw.ObjectRef, read: Read
) -> None:
    calls: List[str] = []

    def bump(obj: Dict[str, Any]) -> None:
        calls.append(obj["data"]["n"])
        obj["data"]["n"] = str(int(obj["data"]["n"]) + 1)

    key = new_key()
    first = client.transact(counter, bump, idempotency_key=key)
    assert first.outcome == Outcome.UPDATED and not first.already_applied
    again = client.transact(counter, bump, idempotency_key=key)
    assert again.outcome == Outcome.UPDATED and again.already_applied
    assert again.object["data"] == {"n": "1"}
    assert calls == ["0"], "the function is not called once the key is recorded"
    assert read(counter)["data"] == {"n": "1"}

    # The key is shared by both RPCs: an update with it finds the transaction's change.
    via_update = client.update(counter, sw.cel(INCREMENT), idempotency_key=key)
    assert via_update.already_applied
    assert read(counter)["data"] == {"n": "1"}


def test_key_with_create_if_missing(
    client: sw.Client, configmap_ref: sw.ObjectRef, read: Read
) -> None:
    key = new_key()
    created = client.update(
        configmap_ref, sw.cel(INCREMENT), create_if_missing={"data": {"n": "0"}}, idempotency_key=key
    )
    assert created.outcome == Outcome.CREATED and not created.already_applied
    assert records_keys(created.object)
    again = client.update(
        configmap_ref, sw.cel(INCREMENT), create_if_missing={"data": {"n": "0"}}, idempotency_key=key
    )
    assert again.already_applied
    assert read(configmap_ref)["data"] == {"n": "1"}


def test_malformed_key_is_invalid(
    client: sw.Client, counter: sw.ObjectRef, read: Read
) -> None:
    for bad in ("has space", "x" * 129, "ü", 'quote"'):
        with pytest.raises(sw.InvalidError) as info:
            client.update(counter, sw.cel(INCREMENT), idempotency_key=bad)
        assert_refuses_key(info.value)
    with pytest.raises(sw.InvalidError) as tx_info:
        client.transact(counter, lambda obj: None, idempotency_key="a/b")
    assert_refuses_key(tx_info.value)
    # The longest accepted key, and every accepted character.
    assert client.update(counter, sw.cel(INCREMENT), idempotency_key="k" * 128).written
    assert client.update(counter, sw.cel(INCREMENT), idempotency_key="Az09._:-").written
    assert read(counter)["data"] == {"n": "2"}


def test_key_refused_for_status_and_apply(
    client: sw.Client, addr: str, widget: sw.ObjectRef, read: Read
) -> None:
    # A status transaction cannot record the key.
    with pytest.raises(sw.InvalidError) as tx_info:
        client.transact(widget, lambda obj: None, status=True, idempotency_key=new_key())
    assert_refuses_key(tx_info.value)

    # Client.patch_status takes no key; the sidecar refuses one on PatchStatus too.
    request = writer_pb2.PatchStatusRequest(
        target=writer_pb2.ObjectRef(
            api_version=widget.api_version,
            kind=widget.kind,
            namespace=widget.namespace,
            name=widget.name,
        ),
        mutation=writer_pb2.Mutation(
            merge_patch=writer_pb2.MergePatch(patch_json='{"status":{"count":9}}')
        ),
        options=writer_pb2.WriteOptions(idempotency_key=new_key()),
    )
    with grpc.insecure_channel(addr) as channel:
        with pytest.raises(grpc.RpcError) as raw:
            writer_pb2_grpc.WriterServiceStub(channel).PatchStatus(request, timeout=30)
    err = sw.from_rpc_error(raw.value)
    assert isinstance(err, sw.InvalidError)
    assert_refuses_key(err)

    # Server-side apply is idempotent already.
    with pytest.raises(sw.InvalidError) as apply_info:
        client.update(
            widget, sw.apply({
                "apiVersion": widget.api_version,
                "kind": widget.kind,
                "metadata": {"name": widget.name, "namespace": widget.namespace},
                "spec": {"size": 5},
            }),
            field_manager="safewrite-python-test",
            idempotency_key=new_key(),
        )
    assert_refuses_key(apply_info.value)

    now = read(widget)
    assert now["status"] == {"count": 0} and now["spec"] == {"size": 1}


def test_async_idempotency_keys(
    addr: str, counter: sw.ObjectRef, widget: sw.ObjectRef, read: Read
) -> None:
    async def bump(obj: Dict[str, Any]) -> Dict[str, Any]:
        await asyncio.sleep(0)
        obj["data"]["n"] = str(int(obj["data"]["n"]) + 1)
        return obj

    async def main() -> None:
        async with sw.AsyncClient(addr, timeout=30) as client:
            key = new_key()
            first = await client.update(counter, sw.cel(INCREMENT), idempotency_key=key)
            assert first.outcome == Outcome.UPDATED and not first.already_applied
            again = await client.update(counter, sw.cel(INCREMENT), idempotency_key=key)
            assert again.outcome == Outcome.UPDATED and again.already_applied
            assert again.object["data"] == {"n": "1"}

            tx_key = new_key()
            tx_first = await client.transact(counter, bump, idempotency_key=tx_key)
            assert not tx_first.already_applied and tx_first.object["data"] == {"n": "2"}
            tx_again = await client.transact(counter, bump, idempotency_key=tx_key)
            assert tx_again.already_applied and tx_again.object["data"] == {"n": "2"}

            with pytest.raises(sw.InvalidError) as bad:
                await client.update(counter, sw.cel(INCREMENT), idempotency_key="not a key")
            assert_refuses_key(bad.value)
            with pytest.raises(sw.InvalidError) as bad_tx:
                await client.transact(counter, bump, idempotency_key="x" * 129)
            assert_refuses_key(bad_tx.value)
            with pytest.raises(sw.InvalidError) as status:
                await client.transact(
                    widget, lambda obj: None, status=True, idempotency_key=new_key()
                )
            assert_refuses_key(status.value)

    asyncio.run(main())
    assert read(counter)["data"] == {"n": "2"}
