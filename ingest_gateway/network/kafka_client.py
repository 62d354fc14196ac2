"""A small asyncio client of the Kafka protocol, for requests between brokers.

One TCP connection per `KafkaClient(host, port)`, opened on the first request and
reopened on the next one after it breaks. Requests may be issued concurrently: they are
written in order and a reader task hands each response to its caller by correlation id
(the broker answers a connection's requests in order, as Kafka's does). Bodies are the
plain dicts of `loglake.protocol`; "records" fields in responses are memoryviews of the
response frame.

Failures surface as the exceptions callers already catch for sockets:
`KafkaConnectionError` (a ConnectionError) when the broker cannot be reached or the
connection breaks, `RequestTimedOut` (a TimeoutError) when no answer comes in time. A
timed-out request closes the connection (as Kafka's NetworkClient does), since a late
answer would otherwise still be in the stream; the requests sharing it fail too.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from typing import Any

from loglake.protocol import (
    MAX_FRAME_SIZE,
    ApiKey,
    ProtocolDecodeError,
    decode_response,
    encode_request,
    read_frame_size,
)
from loglake.security.client import PLAINTEXT, ClientSecurity, SaslClientExchange
from loglake.security.scram import ScramError

log = logging.getLogger(__name__)

DEFAULT_REQUEST_TIMEOUT_MS = 30_000
DEFAULT_CONNECT_TIMEOUT_MS = 10_000


class KafkaConnectionError(ConnectionError):
    """The broker is unreachable, or the connection broke before the answer came."""


class RequestTimedOut(TimeoutError):
    """No answer within the request timeout (the connection has been closed)."""


class KafkaClient:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "loglake-broker",
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS,
        max_response_bytes: int = MAX_FRAME_SIZE,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.host = host
        self.port = port
        self.security = security
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.max_response_bytes = max_response_bytes
        self._correlation = itertools.count(1)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task | None = None
        # correlation id -> (future, api key, version), in the order the requests were sent
        self._pending: dict[int, tuple[asyncio.Future, int, int]] = {}
        self._connect_lock = asyncio.Lock()
        self._write_lock = asyncio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"KafkaClient({self.host}:{self.port}, connected={self.connected})"

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def request(
        self,
        api_key: int,
        version: int,
        body: dict[str, Any],
        *,
        timeout_ms: int | None = None,
        expect_response: bool = True,
    ) -> dict[str, Any]:
        """Send one request and return the decoded response body.

        `timeout_ms` (default: request_timeout_ms) covers connecting, sending and the
        answer. With `expect_response=False` (Produce with acks=0) nothing is awaited
        after the send and {} is returned.
        """
        if self._closed:
            raise KafkaConnectionError(f"client for {self.host}:{self.port} is closed")
        timeout = (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if not self.connected:
            try:
                await asyncio.wait_for(self._connect(), timeout)
            except TimeoutError:
                raise RequestTimedOut(f"connecting to {self.host}:{self.port} took over {timeout:.3f}s") from None
        writer = self._writer
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        frame = encode_request(api_key, version, correlation_id, self.client_id, body)
        future: asyncio.Future = loop.create_future()
        if expect_response:
            self._pending[correlation_id] = (future, api_key, version)
        try:
            async with self._write_lock:
                if writer is None or writer is not self._writer or writer.is_closing():
                    raise KafkaConnectionError(f"connection to {self.host}:{self.port} closed")
                writer.write(frame)
                # Usually the socket took it all: no drain (wait_for would make it a task).
                if writer.transport.get_write_buffer_size():
                    await asyncio.wait_for(writer.drain(), max(0.0, deadline - loop.time()))
            if not expect_response:
                return {}
            # The deadline fails the future itself: cheaper than wait_for and shield, and
            # the read loop skips an answer that comes after (the future is done).
            timer = loop.call_at(deadline, _expire, future)
            try:
                return await future
            finally:
                timer.cancel()
        except TimeoutError:
            self._disconnect(writer, f"a request timed out on {self.host}:{self.port}")
            raise RequestTimedOut(
                f"no answer from {self.host}:{self.port} to api {api_key} v{version} within {timeout:.3f}s"
            ) from None
        except KafkaConnectionError:
            raise
        except OSError as exc:
            self._disconnect(writer, f"{self.host}:{self.port}: {exc}")
            raise KafkaConnectionError(f"{self.host}:{self.port}: {exc}") from exc
        finally:
            # A caller that gave up (timeout, cancellation) leaves no entry behind; a late
            # answer is then skipped by its correlation id.
            self._pending.pop(correlation_id, None)
            if not future.done():
                future.cancel()

    async def _connect(self) -> None:
        if self.connected:
            return
        async with self._connect_lock:
            if self.connected:
                return
            tls = self.security.tls
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(
                        self.host, self.port, limit=1 << 20, ssl=tls, server_hostname=self.host if tls else None
                    ),
                    self.connect_timeout_ms / 1000,
                )
            except TimeoutError:
                raise KafkaConnectionError(f"connecting to {self.host}:{self.port} timed out") from None
            except OSError as exc:  # ssl.SSLError too
                raise KafkaConnectionError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.security.mechanism is not None:
                try:
                    await asyncio.wait_for(self._authenticate(reader, writer), self.connect_timeout_ms / 1000)
                except (TimeoutError, OSError, ProtocolDecodeError, ScramError) as exc:
                    writer.close()
                    raise KafkaConnectionError(f"SASL with {self.host}:{self.port} failed: {exc}") from None
            self._reader, self._writer = reader, writer
            self._read_task = asyncio.get_running_loop().create_task(self._read_loop(reader, writer))

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, api_key: int, version: int, body: dict
    ) -> dict[str, Any]:
        """One request and its answer, before the read loop runs (SASL)."""
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        writer.write(encode_request(api_key, version, correlation_id, self.client_id, body))
        await writer.drain()
        size = read_frame_size(await reader.readexactly(4), self.max_response_bytes)
        return decode_response(api_key, version, await reader.readexactly(size))[1]

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """SaslHandshake v1, then SaslAuthenticate until the mechanism is done."""
        security = self.security
        mechanism = security.mechanism or ""
        answer = await self._exchange(reader, writer, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
        if answer["error_code"]:
            raise KafkaConnectionError(f"SaslHandshake: error {answer['error_code']} (offered {answer['mechanisms']})")

        exchange = SaslClientExchange(security)
        token: bytes | None = exchange.first()
        while token is not None:
            reply = await self._exchange(reader, writer, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
            if reply["error_code"]:
                raise KafkaConnectionError(f"SaslAuthenticate: {reply['error_message']}")
            token = exchange.respond(bytes(reply["auth_bytes"]))

    async def _read_loop(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reason = f"connection to {self.host}:{self.port} closed"
        try:
            while True:
                size = read_frame_size(await reader.readexactly(4), self.max_response_bytes)
                payload = await reader.readexactly(size)
                correlation_id = int.from_bytes(payload[:4], "big", signed=True)
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    continue  # the caller gave up on it
                future, api_key, version = entry
                try:
                    _, body = decode_response(api_key, version, payload)
                except ProtocolDecodeError as exc:
                    if not future.done():
                        future.set_exception(exc)
                    raise
                if not future.done():
                    future.set_result(body)
        except asyncio.IncompleteReadError:
            pass
        except asyncio.CancelledError:
            raise
        except (OSError, ProtocolDecodeError) as exc:
            reason = f"connection to {self.host}:{self.port} failed: {exc}"
        finally:
            self._disconnect(writer, reason, cancel_reader=False)

    def _disconnect(self, writer: asyncio.StreamWriter | None, reason: str, cancel_reader: bool = True) -> None:
        """Close `writer`'s connection if it is still the current one; every request
        waiting on it fails with KafkaConnectionError(reason)."""
        if writer is None or writer is not self._writer:
            return
        task = self._read_task
        self._reader = self._writer = self._read_task = None
        pending, self._pending = self._pending, {}
        for future, _, _ in pending.values():
            if not future.done():
                future.set_exception(KafkaConnectionError(reason))
                future.exception()  # retrieved: no "never retrieved" warning if nobody waits
        writer.close()
        if cancel_reader and task is not None and task is not asyncio.current_task():
            task.cancel()

    def close_nowait(self) -> None:
        """Close without waiting (from synchronous code); later requests fail."""
        self._closed = True
        self._disconnect(self._writer, f"client for {self.host}:{self.port} closed")

    async def close(self) -> None:
        task = self._read_task
        writer = self._writer
        self.close_nowait()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
        if writer is not None:
            try:
                await writer.wait_closed()
            except (OSError, ConnectionError):
                pass


def _expire(future: asyncio.Future) -> None:
    if not future.done():
        future.set_exception(TimeoutError())
