"""The ``token`` option against the harness's sidecar that requires a token
(``--token-file``): without the token, or with another one, a call is refused before
anything runs; with it, calls are served, on both clients and on unary and streaming
calls alike, gets included."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Dict, Optional

import grpc
import pytest

import safewrite_client as sw

#: A token given to the client, and the reason the sidecar refuses it with.
REFUSALS = [(None, "TOKEN_REQUIRED"), ("not-the-token", "TOKEN_INVALID")]


@pytest.fixture
def token_addr(addr: str) -> str:
    value = os.environ.get("SAFEWRITE_TOKEN_ADDR")
    if not value:
        pytest.skip("SAFEWRITE_TOKEN_ADDR is unset: run through test.sh")
    return value


@pytest.fixture
def sidecar_token(token_addr: str) -> str:
    return os.environ["SAFEWRITE_TOKEN"]


def check_refusal(err: sw.SafewriteError, reason: str) -> None:
    assert isinstance(err, sw.UnauthenticatedError)
    assert err.code == grpc.StatusCode.UNAUTHENTICATED
    assert err.reason == reason and err.reason_name == reason
    assert err.domain == sw.DOMAIN
    assert not err.retryable
    assert err.attempts == 0


def set_n(obj: Dict[str, Any]) -> None:
    obj["data"] = {"n": "1"}


@pytest.mark.parametrize("token, reason", REFUSALS)
def test_a_call_without_the_sidecars_token_is_refused(
    token_addr: str,
    token: Optional[str],
    reason: str,
    client: sw.Client,
    configmap_ref: sw.ObjectRef,
) -> None:
    with sw.Client(token_addr, token=token, timeout=30) as refused:
        with pytest.raises(sw.UnauthenticatedError) as unary:
            refused.update(configmap_ref, sw.merge_patch({"data": {"n": "1"}}), create_if_missing={})
        check_refusal(unary.value, reason)
        with pytest.raises(sw.UnauthenticatedError) as stream:
            refused.transact(configmap_ref, set_n, create_if_missing={})
        check_refusal(stream.value, reason)
        with pytest.raises(sw.UnauthenticatedError) as read:
            refused.get(configmap_ref)
        check_refusal(read.value, reason)
    with pytest.raises(sw.NotFoundError):  # nothing was written
        client.update(configmap_ref, sw.merge_patch({}))


def test_a_call_with_the_sidecars_token_is_served(
    token_addr: str, sidecar_token: str, configmap_ref: sw.ObjectRef
) -> None:
    # As a token file holds it: surrounding whitespace is not part of the token.
    with sw.Client(token_addr, token=sidecar_token + "\n", timeout=30) as client:
        created = client.update(
            configmap_ref, sw.merge_patch({"data": {"n": "0"}}), create_if_missing={}
        )
        assert created.outcome == sw.Outcome.CREATED
        assert created.object["data"] == {"n": "0"}
        changed = client.transact(configmap_ref, set_n)
        assert changed.outcome == sw.Outcome.UPDATED
        assert changed.object["data"] == {"n": "1"}
        read = client.get(configmap_ref, at_least=changed)
        assert read.remembered and read.object["data"] == {"n": "1"}


@pytest.mark.parametrize("token, reason", REFUSALS)
def test_async_a_call_without_the_sidecars_token_is_refused(
    token_addr: str,
    token: Optional[str],
    reason: str,
    client: sw.Client,
    configmap_ref: sw.ObjectRef,
) -> None:
    async def main() -> None:
        async with sw.AsyncClient(token_addr, token=token, timeout=30) as refused:
            with pytest.raises(sw.UnauthenticatedError) as unary:
                await refused.update(
                    configmap_ref, sw.merge_patch({"data": {"n": "1"}}), create_if_missing={}
                )
            check_refusal(unary.value, reason)
            with pytest.raises(sw.UnauthenticatedError) as stream:
                await refused.transact(configmap_ref, set_n, create_if_missing={})
            check_refusal(stream.value, reason)
            with pytest.raises(sw.UnauthenticatedError) as read:
                await refused.get(configmap_ref)
            check_refusal(read.value, reason)

    asyncio.run(main())
    with pytest.raises(sw.NotFoundError):  # nothing was written
        client.update(configmap_ref, sw.merge_patch({}))


def test_async_a_call_with_the_sidecars_token_is_served(
    token_addr: str, sidecar_token: str, configmap_ref: sw.ObjectRef
) -> None:
    async def main() -> None:
        async with sw.AsyncClient(token_addr, token=sidecar_token, timeout=30) as client:
            created = await client.update(
                configmap_ref, sw.merge_patch({"data": {"n": "0"}}), create_if_missing={}
            )
            assert created.outcome == sw.Outcome.CREATED
            changed = await client.transact(configmap_ref, set_n)
            assert changed.outcome == sw.Outcome.UPDATED
            assert changed.object["data"] == {"n": "1"}

    asyncio.run(main())
