"""The client-entity APIs: SCRAM credentials (DescribeUserScramCredentials,
AlterUserScramCredentials, KIP-554) and client quotas (DescribeClientQuotas,
AlterClientQuotas, KIP-546), what `kafka-configs.sh --entity-type users|clients` and
AdminClient's `alter_user_scram_credentials` use.

Both are entity configs in the metadata store (`users/<user>`, `clients/<client id>`,
`users/<user>/clients/<client id>`, `<default>` for a default), side by side as in Kafka.
Any broker writes them, as Kafka's brokers do in ZooKeeper mode, and every broker follows
the store's change notifications. Checks and error codes are Kafka's (its ZkAdminManager):
Describe on the cluster to list credentials, Alter to change them; DescribeConfigs /
AlterConfigs on the cluster for quotas. IP entities (connection-rate quotas) are not
enforced here, so setting one is refused rather than stored to no effect.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from loglake.errors import ErrorCode, KafkaError
from loglake.protocol import ApiKey
from loglake.protocol.bodies import (
    AlterClientQuotasRequest,
    AlterClientQuotasRequestEntityData,
    AlterClientQuotasRequestOpData,
    AlterClientQuotasResponse,
    AlterClientQuotasResponseEntryData,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResponseAlterUserScramCredentialsResult,
    DescribeClientQuotasRequest,
    DescribeClientQuotasRequestComponentData,
    DescribeClientQuotasResponse,
    DescribeClientQuotasResponseEntityData,
    DescribeClientQuotasResponseEntryData,
    DescribeClientQuotasResponseValueData,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResponseCredentialInfo,
    DescribeUserScramCredentialsResponseDescribeUserScramCredentialsResult,
)
from loglake.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from loglake.security.quotas import CONSUMER_BYTE_RATE, DEFAULT, PRODUCER_BYTE_RATE, QUOTA_KEYS
from loglake.security.sanitizer import desanitize, sanitize
from loglake.security.scram import MIN_ITERATIONS, ScramCredential, credential_from_salted_password

from ingest_gateway.apis.request_router import handles
from ingest_gateway.metadata.admin_manager import ADMIN_TIMEOUT_MS
from ingest_gateway.metadata.metadata_thread import Deadline, MetadataThread
from ingest_gateway.network.request_context import RequestContext

if TYPE_CHECKING:
    from loglake.coordination.store import MetadataStore

    from ingest_gateway.apis.authorization import RequestAuthorization

log = logging.getLogger(__name__)

T = TypeVar("T")


# The protocol's mechanism types (ScramMechanism.type in Kafka).
MECHANISM_TYPES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
TYPE_OF_MECHANISM = {name: t for t, name in MECHANISM_TYPES.items()}
MAX_ITERATIONS = 16384  # Kafka's upper bound for an upserted credential

USER, CLIENT_ID, IP = "user", "client-id", "ip"
_STORE_KIND = {USER: "users", CLIENT_ID: "clients"}
# Quota keys whose values are whole numbers (Kafka's LONG configs); the others are doubles.
_INTEGRAL_QUOTAS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE)

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


@dataclass(frozen=True)
class _Component:
    entity_type: str
    match_type: int
    match: str | None

    def matches(self, name: str) -> bool:
        if self.match_type == MATCH_EXACT:
            return name == self.match
        if self.match_type == MATCH_DEFAULT:
            return name == DEFAULT
        return True


def _entity_of(path: str) -> dict[str, str] | None:
    """`users/a/clients/b` -> {"user": "a", "client-id": "b"}; None for another kind of path."""
    parts = path.split("/")
    kinds = {"users": USER, "clients": CLIENT_ID}
    if len(parts) not in (2, 4) or any(parts[i] not in kinds for i in range(0, len(parts), 2)):
        return None
    entity = {kinds[parts[i]]: desanitize(parts[i + 1]) for i in range(0, len(parts), 2)}
    return entity if len(entity) == len(parts) // 2 else None


def _entity_body(entity: dict[str, str]) -> list[DescribeClientQuotasResponseEntityData]:
    return [
        {"entity_type": t, "entity_name": None if n == DEFAULT else n}
        for t, n in sorted(entity.items(), key=lambda item: item[0] != USER)
    ]


def _quota_path(entity: list[AlterClientQuotasRequestEntityData]) -> str:
    """The store path of a request's entity, checked as Kafka checks it."""
    if not entity:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    names: dict[str, str] = {}
    for component in entity:
        entity_type, name = component["entity_type"], component["entity_name"]
        if entity_type not in (USER, CLIENT_ID, IP):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {entity_type}")
        if name == "":
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid {entity_type} name {name!r}")
        names[entity_type] = DEFAULT if name is None else sanitize(name)
    if IP in names:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, "IP quotas (connection_creation_rate) are not enforced by this broker"
        )
    if USER in names and CLIENT_ID in names:
        return f"users/{names[USER]}/clients/{names[CLIENT_ID]}"
    (entity_type, name) = next(iter(names.items()))
    return f"{_STORE_KIND[entity_type]}/{name}"


def _quota_value(key: str, value: float) -> str:
    if key not in QUOTA_KEYS:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
    if not value > 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Configuration {key} must be positive, not {value}")
    if key in _INTEGRAL_QUOTAS:
        whole = round(value)
        if abs(whole - value) > 1e-6:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Configuration {key} must be a LONG value")
        return str(whole)
    return repr(float(value))


class ClientEntityApis:
    def __init__(
        self,
        store: MetadataStore,
        authorization: RequestAuthorization,
        metadata_thread: MetadataThread,
        store_timeout_ms: int = ADMIN_TIMEOUT_MS,
    ) -> None:
        self._store = store
        self._auth = authorization
        self._thread = metadata_thread
        # How long a request waits for the store before it is answered REQUEST_TIMED_OUT.
        self._store_timeout_ms = store_timeout_ms

    async def _stored(self, deadline: Deadline, fn: Callable[..., T], *args: Any) -> T:
        """A store call on the metadata thread, answered by `deadline` (else REQUEST_TIMED_OUT)."""
        return await self._thread.run(fn, *args, timeout_ms=deadline.remaining_ms())

    def _cluster_allowed(self, context: RequestContext, operation: AclOperation) -> bool:
        return self._auth.allowed(context, operation, ResourceType.CLUSTER, CLUSTER_NAME)

    # SCRAM credentials -----------------------------------------------------------------

    @handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
    async def describe_user_scram_credentials(
        self, context: RequestContext, body: DescribeUserScramCredentialsRequest
    ) -> DescribeUserScramCredentialsResponse:
        response: DescribeUserScramCredentialsResponse = {
            "throttle_time_ms": 0,
            "error_code": 0,
            "error_message": None,
            "results": [],
        }
        if not self._cluster_allowed(context, AclOperation.DESCRIBE):
            return response | {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
        requested = [u["name"] for u in body["users"] or ()]
        deadline = Deadline.after_ms(self._store_timeout_ms)
        if not requested:
            every = await self._stored(deadline, self._store.all_user_credentials)
            response["results"] = [self._described(u, c) for u, c in every.items()]
            return response
        counts = Counter(requested)
        for user in dict.fromkeys(requested):  # each user once, in the request's order
            if user == "":
                response["results"].append(
                    _describe_error(user, ErrorCode.RESOURCE_NOT_FOUND, "Username must not be empty")
                )
            elif counts[user] > 1:
                message = f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}"
                response["results"].append(_describe_error(user, ErrorCode.DUPLICATE_RESOURCE, message))
            else:
                credentials = await self._stored(deadline, self._store.user_credentials, user)
                if credentials:
                    response["results"].append(self._described(user, credentials))
                else:
                    message = f"Attempt to describe a user credential that does not exist: {user}"
                    response["results"].append(_describe_error(user, ErrorCode.RESOURCE_NOT_FOUND, message))
        return response

    @staticmethod
    def _described(
        user: str, credentials: dict[str, str]
    ) -> DescribeUserScramCredentialsResponseDescribeUserScramCredentialsResult:
        infos: list[DescribeUserScramCredentialsResponseCredentialInfo] = [
            {"mechanism": TYPE_OF_MECHANISM[m], "iterations": ScramCredential.from_config(c).iterations}
            for m, c in sorted(credentials.items())
        ]
        return {"user": user, "error_code": 0, "error_message": None, "credential_infos": infos}

    @handles(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
    async def alter_user_scram_credentials(
        self, context: RequestContext, body: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse:
        deletions, upsertions = body["deletions"], body["upsertions"]
        users = list(dict.fromkeys(c["name"] for c in (*deletions, *upsertions)))
        if not self._cluster_allowed(context, AclOperation.ALTER):
            denied = [_user_error(u, ErrorCode.CLUSTER_AUTHORIZATION_FAILED) for u in users]
            return {"throttle_time_ms": 0, "results": denied}
        failed: dict[str, tuple[ErrorCode, str]] = {}
        # (user, mechanism type, iterations: None for a deletion), in the request's order.
        requested: list[tuple[str, int, int | None]] = [
            *((d["name"], d["mechanism"], None) for d in deletions),
            *((u["name"], u["mechanism"], u["iterations"]) for u in upsertions),
        ]
        for user, mechanism_type, iterations in requested:
            mechanism = MECHANISM_TYPES.get(mechanism_type)
            if user == "":
                failed[user] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
            elif mechanism is None:
                failed[user] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
            elif iterations is not None and iterations < MIN_ITERATIONS:
                failed[user] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
            elif iterations is not None and iterations > MAX_ITERATIONS:
                failed[user] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        pairs = Counter((user, mechanism_type) for user, mechanism_type, _ in requested if user not in failed)
        for (user, _), count in pairs.items():
            if count > 1:
                failed[user] = (
                    ErrorCode.DUPLICATE_RESOURCE,
                    "A user credential cannot be altered twice in the same request",
                )
        changed = []
        deadline = Deadline.after_ms(self._store_timeout_ms)
        for user in users:
            if user in failed:
                continue
            gone = [MECHANISM_TYPES[d["mechanism"]] for d in deletions if d["name"] == user]
            upserted = {}
            for u in (u for u in upsertions if u["name"] == user):
                mechanism = MECHANISM_TYPES[u["mechanism"]]
                credential = credential_from_salted_password(
                    mechanism, bytes(u["salted_password"]), bytes(u["salt"]), u["iterations"]
                )
                upserted[mechanism] = credential.to_config()

            def altered(credentials: dict[str, str], gone: list[str] = gone, upserted: dict = upserted) -> dict:
                if any(m not in credentials for m in gone):
                    raise KafkaError(
                        ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
                    )
                return {m: c for m, c in credentials.items() if m not in gone} | upserted

            try:
                await self._stored(deadline, self._store.update_user_credentials, user, altered)
            except KafkaError as exc:
                failed[user] = (exc.code, exc.message)
                continue
            changed.append(user)
        log.info("SCRAM credentials altered for %s", ", ".join(changed) or "no user")
        results = [_user_error(u, *failed[u]) if u in failed else _user_error(u, ErrorCode.NONE) for u in users]
        return {"throttle_time_ms": 0, "results": results}

    # Client quotas ---------------------------------------------------------------------

    @handles(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1)
    async def describe_client_quotas(
        self, context: RequestContext, body: DescribeClientQuotasRequest
    ) -> DescribeClientQuotasResponse:
        response: DescribeClientQuotasResponse = {
            "throttle_time_ms": 0,
            "error_code": 0,
            "error_message": None,
            "entries": None,
        }
        if not self._cluster_allowed(context, AclOperation.DESCRIBE_CONFIGS):
            return response | {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
        try:
            components = _filter_components(body["components"])
        except KafkaError as exc:
            return response | {"error_code": exc.code, "error_message": exc.message}
        if IP in components:
            return response | {"entries": []}  # no IP quotas are kept
        entries: list[DescribeClientQuotasResponseEntryData] = []
        deadline = Deadline.after_ms(self._store_timeout_ms)
        for path, config in sorted((await self._stored(deadline, self._store.entity_configs)).items()):
            entity = _entity_of(path)
            quotas = {k: float(v) for k, v in config.items() if k in QUOTA_KEYS}
            if entity is None or not quotas or not _filter_matches(components, body["strict"], entity):
                continue
            values: list[DescribeClientQuotasResponseValueData] = [
                {"key": k, "value": v} for k, v in sorted(quotas.items())
            ]
            entries.append({"entity": _entity_body(entity), "values": values})
        return response | {"entries": entries}

    @handles(ApiKey.ALTER_CLIENT_QUOTAS, 0, 1)
    async def alter_client_quotas(
        self, context: RequestContext, body: AlterClientQuotasRequest
    ) -> AlterClientQuotasResponse:
        allowed = self._cluster_allowed(context, AclOperation.ALTER_CONFIGS)
        deadline = Deadline.after_ms(self._store_timeout_ms)
        results: list[AlterClientQuotasResponseEntryData] = []
        for entry in body["entries"]:
            result: AlterClientQuotasResponseEntryData = {
                "error_code": 0,
                "error_message": None,
                "entity": entry["entity"],
            }
            try:
                if not allowed:
                    raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                await self._alter_quotas(deadline, _quota_path(entry["entity"]), entry["ops"], body["validate_only"])
            except KafkaError as exc:
                result["error_code"], result["error_message"] = exc.code, exc.message or None
            results.append(result)
        return {"throttle_time_ms": 0, "entries": results}

    async def _alter_quotas(
        self, deadline: Deadline, path: str, ops: list[AlterClientQuotasRequestOpData], validate_only: bool
    ) -> None:
        def altered(config: dict[str, str]) -> dict[str, str]:
            for op in ops:
                if op["remove"]:
                    config.pop(op["key"], None)
                else:
                    config[op["key"]] = _quota_value(op["key"], op["value"])
            return config

        if validate_only:
            altered(await self._stored(deadline, self._store.entity_config, path))
        else:
            await self._stored(deadline, self._store.update_entity_config, path, altered)


def _filter_components(components: list[DescribeClientQuotasRequestComponentData]) -> dict[str, _Component]:
    """A DescribeClientQuotas filter by entity type, checked as Kafka checks it."""
    by_type: dict[str, _Component] = {}
    for c in components:
        entity_type = c["entity_type"]
        if entity_type == "":
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Unexpected empty filter component entity type")
        if entity_type not in (USER, CLIENT_ID, IP):
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"Custom entity type '{entity_type}' not supported")
        if entity_type in by_type:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Duplicate {entity_type} filter component entity type")
        if c["match_type"] not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unexpected match type {c['match_type']}")
        if c["match_type"] == MATCH_EXACT and c["match"] is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "An exact match needs a name")
        by_type[entity_type] = _Component(entity_type, c["match_type"], c["match"])
    if IP in by_type and len(by_type) > 1:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            "Invalid entity filter component combination, IP filter component should not be used with "
            "user or clientId filter component.",
        )
    return by_type


def _filter_matches(components: dict[str, _Component], strict: bool, entity: dict[str, str]) -> bool:
    for entity_type in (USER, CLIENT_ID):
        component, name = components.get(entity_type), entity.get(entity_type)
        if component is None:
            if strict and name is not None:
                return False
        elif name is None or not component.matches(name):
            return False
    return True


def _user_error(
    user: str, code: ErrorCode, message: str | None = None
) -> AlterUserScramCredentialsResponseAlterUserScramCredentialsResult:
    return {"user": user, "error_code": code, "error_message": message}


def _describe_error(
    user: str, code: ErrorCode, message: str
) -> DescribeUserScramCredentialsResponseDescribeUserScramCredentialsResult:
    return {**_user_error(user, code, message), "credential_infos": []}
