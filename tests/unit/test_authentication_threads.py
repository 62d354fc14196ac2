"""Credential checks that the metadata store does not answer in time: `AuthenticationThreads`
answers REQUEST_TIMED_OUT after its deadline and skips calls whose caller was answered; a
SASL exchange then fails with that message (SASL_AUTHENTICATION_FAILED, connection closed)
and an HTTP request is answered 504, not 401."""

from __future__ import annotations

import asyncio
import base64
import threading
import time

import httpx
import pytest
from fastapi import FastAPI

from ingest_gateway.apis.authorization import RequestAuthorization
from ingest_gateway.http.security import BasicAuthenticator, HttpSecurity
from ingest_gateway.network.authentication_threads import AuthenticationThreads
from ingest_gateway.network.request_context import CloseConnection
from ingest_gateway.network.sasl_authenticator import SaslAuthenticator
from loglake.errors import ErrorCode, KafkaError
from loglake.protocol import ApiKey, decode_response
from loglake.protocol.header import RequestHeader
from loglake.security.scram import ScramCredential

TIMEOUT_MS = 200
ANSWERED_WITHIN_S = 1.5


class SlowStore:
    """A credential lookup that blocks until released (a stalled ZooKeeper); counts its calls."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.calls = 0

    def credentials_of(self, user: str) -> dict[str, ScramCredential]:
        self.calls += 1
        self.released.wait(10)
        return {}


def test_a_call_past_its_deadline_times_out_and_one_not_started_by_then_is_not_made() -> None:
    async def main() -> None:
        threads = AuthenticationThreads(TIMEOUT_MS, threads=1)
        store = SlowStore()
        assert await threads.run(lambda x: x + 1, 1) == 2
        started = time.monotonic()
        calls = [asyncio.create_task(threads.run(store.credentials_of, user)) for user in ("a", "b")]
        for call in calls:
            with pytest.raises(KafkaError) as caught:
                await call
            assert caught.value.code == ErrorCode.REQUEST_TIMED_OUT
        assert time.monotonic() - started < ANSWERED_WITHIN_S
        store.released.set()
        assert await threads.run(lambda: "after") == "after"  # the one thread is free again
        assert store.calls == 1  # "b" waited for the thread past its deadline: never made
        threads.close()

    asyncio.run(main())


def test_a_sasl_exchange_whose_check_times_out_fails_and_closes() -> None:
    async def main() -> None:
        store = SlowStore()
        sasl = SaslAuthenticator(("PLAIN",), store.credentials_of, 0, AuthenticationThreads(TIMEOUT_MS))
        handshake = RequestHeader(ApiKey.SASL_HANDSHAKE, 1, 1, "test")
        await sasl.handle(handshake, {"mechanism": "PLAIN"})
        authenticate = RequestHeader(ApiKey.SASL_AUTHENTICATE, 2, 2, "test")
        started = time.monotonic()
        with pytest.raises(CloseConnection) as caught:
            await sasl.handle(authenticate, {"auth_bytes": b"\0alice\0secret"})
        assert time.monotonic() - started < ANSWERED_WITHIN_S
        assert caught.value.response is not None
        _, answer = decode_response(ApiKey.SASL_AUTHENTICATE, 2, b"".join(caught.value.response)[4:])
        assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert "did not answer" in answer["error_message"]
        assert not sasl.authenticated
        store.released.set()

    asyncio.run(main())


def test_an_http_request_whose_check_times_out_is_answered_504() -> None:
    store = SlowStore()
    app = FastAPI()

    @app.get("/topics")
    async def topics() -> list[str]:
        return []

    authenticator = BasicAuthenticator(store.credentials_of, AuthenticationThreads(TIMEOUT_MS))
    secured = HttpSecurity(app, RequestAuthorization(None), authenticator)
    basic = "Basic " + base64.b64encode(b"alice:secret").decode()

    async def main() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(secured), base_url="http://broker") as client:
            started = time.monotonic()
            answer = await client.get("/topics", headers={"Authorization": basic})
            assert time.monotonic() - started < ANSWERED_WITHIN_S
            assert (answer.status_code, answer.json()["kafka_error"]) == (504, "REQUEST_TIMED_OUT")
            store.released.set()
            # Answered again, the store says there is no such user: 401.
            assert (await client.get("/topics", headers={"Authorization": basic})).status_code == 401

    asyncio.run(main())
