"""The web console's pages under /ui: server-rendered Jinja2 templates, htmx for the live parts.

Every page reads the whole cluster (ingest_gateway/http/console/cluster.py), whichever broker
serves it. Changes (create, alter config, delete) go through a confirmation page and then
this broker's own HTTP API, so they are validated and applied exactly as the REST API does.
Bad input is answered with an HTML error page and a 4xx status before anything changes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from loglake.config import LogConfig, parse_overrides
from loglake.errors import KafkaError

from ingest_gateway.http.console.cluster import Cluster, ConsoleError
from ingest_gateway.http.console.render import RENDER_MODES, LagHistory, Line, TrafficHistory, line_chart, render_bytes
from ingest_gateway.http.errors import http_status

if TYPE_CHECKING:
    from collections.abc import Callable

    from loglake.config import BrokerConfig

    from ingest_gateway.metadata.admin_manager import AdminManager
    from ingest_gateway.metadata.metadata_cache import MetadataCache
    from ingest_gateway.observability.metrics import BrokerMetrics

HERE = Path(__file__).parent
STATIC = {p.name: p for p in (HERE / "static").iterdir() if p.is_file()}
PAGE_SIZE = 50

templates = Jinja2Templates(directory=HERE / "templates")
templates.env.filters["urlpart"] = lambda s: quote(str(s), safe="")


def _error_page(request: Request, status: int, message: str) -> HTMLResponse:
    return templates.TemplateResponse(request, "error.html", {"status": status, "message": message}, status_code=status)


class _ConsoleRoute(APIRoute):
    """Answers a console route's failures with the HTML error page (the rest of the API keeps
    its JSON errors): bad parameters, the cluster's Kafka errors, the console's own."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except ConsoleError as exc:
                return _error_page(request, exc.status, exc.message)
            except KafkaError as exc:
                status = http_status(exc.code)
                return _error_page(request, status, f"{exc.code.name}: {exc.message}")
            except RequestValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc'][1:]))}: {e['msg']}" for e in exc.errors())
                return _error_page(request, 422, f"bad request parameters: {problems}")

        return guarded


def _int(name: str, raw: str | None, minimum: int | None = None) -> int:
    """A form or query field as an integer, else a 422 naming the field."""
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConsoleError(422, f"{name} must be an integer, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ConsoleError(422, f"{name} must be at least {minimum}, not {value}")
    return value


def _timestamp_ms(raw: str) -> int:
    """A datetime-local field (UTC) or milliseconds since the epoch."""
    if raw.strip().isdigit():
        return int(raw)
    try:
        when = dt.datetime.fromisoformat(raw.strip())
    except ValueError:
        raise ConsoleError(
            422, f"time must be like 2026-01-31T12:00 (UTC) or epoch milliseconds, not {raw!r}"
        ) from None
    return int(when.replace(tzinfo=when.tzinfo or dt.UTC).timestamp() * 1000)


async def _form(request: Request) -> dict[str, str]:
    """An application/x-www-form-urlencoded body, each field's last value."""
    fields = parse_qs((await request.body()).decode(errors="replace"), keep_blank_values=True)
    return {k: v[-1] for k, v in fields.items()}


def _configs(raw: str) -> dict[str, str]:
    """name=value lines of topic configs, checked against the known names and rules."""
    items = [line.strip() for line in raw.splitlines() if line.strip()]
    try:
        configs = parse_overrides(items)
    except ValueError as exc:
        raise ConsoleError(422, f"configs: {exc}") from None
    LogConfig.from_properties({k: v for k, v in configs.items() if v != ""})
    return configs


def console_routes(
    config: BrokerConfig,
    admin: AdminManager,
    cache: MetadataCache,
    broker_metrics: BrokerMetrics | None,
    cluster_status: Callable[[], Coroutine[Any, Any, dict[str, Any]]],
) -> APIRouter:
    router = APIRouter(prefix="/ui", route_class=_ConsoleRoute, include_in_schema=False)
    traffic = TrafficHistory()
    lag_history = LagHistory()

    def page(request: Request, name: str, **context: Any) -> HTMLResponse:
        return templates.TemplateResponse(request, name, {"broker_id": config.broker_id, **context})

    async def cluster(request: Request) -> Cluster:
        return Cluster(config, await cluster_status(), request.app, request.headers.get("authorization"))

    @router.get("/static/{name}")
    async def static(name: str) -> Response:
        path = STATIC.get(name)
        if path is None:
            raise ConsoleError(404, f"no static file {name!r}")
        return FileResponse(path, headers={"cache-control": "max-age=3600"})

    @router.get("")
    async def overview(request: Request) -> HTMLResponse:
        async with await cluster(request) as c:
            status = c.status
            topics = sorted({p["topic"] for p in status["partitions"]})
            flagged = [p for p in status["partitions"] if p["under_replicated"] or p["offline"]]
            return page(
                request,
                "overview.html",
                status=status,
                brokers=c.brokers(),
                topics=topics,
                flagged=flagged,
                log_dirs=await c.offline_log_dirs(),
            )

    # Topics ------------------------------------------------------------------------------

    @router.get("/topics")
    async def topics(request: Request, internal: bool = False) -> HTMLResponse:
        async with await cluster(request) as c:
            rows: dict[str, dict[str, Any]] = {}
            for p in c.status["partitions"]:
                if p["topic"].startswith("__") and not internal:
                    continue
                row = rows.setdefault(
                    p["topic"], {"name": p["topic"], "partitions": 0, "rf": 0, "under": 0, "offline": 0}
                )
                row["partitions"] += 1
                row["rf"] = max(row["rf"], len(p["replicas"]))
                row["under"] += p["under_replicated"]
                row["offline"] += p["offline"]
            return page(
                request,
                "topics.html",
                topics=list(rows.values()),
                internal=internal,
                defaults={
                    "partitions": config.num_partitions,
                    "replication_factor": config.default_replication_factor,
                },
            )

    @router.post("/topics")
    async def create_topic(request: Request) -> Response:
        form = await _form(request)
        name = form.get("name", "").strip()
        if not name:
            raise ConsoleError(422, "name: a topic name is required")
        partitions = _int("partitions", form.get("partitions"), 1)
        rf = _int("replication factor", form.get("replication_factor"), 1)
        configs = _configs(form.get("configs", ""))
        await admin.create_topic(name, partitions, rf, configs, validate_only=True)
        if form.get("confirm") != "yes":
            return page(
                request,
                "confirm.html",
                action="/ui/topics",
                title=f"Create topic {name}?",
                details=[f"{partitions} partition(s), replication factor {rf}"]
                + [f"{k} = {v}" for k, v in configs.items()],
                fields=form,
                cancel="/ui/topics",
            )
        async with await cluster(request) as c:
            body = {"name": name, "partitions": partitions, "replication_factor": rf, "configs": configs}
            await c.call(c.self_id, "POST", "/topics", json=body)
        return RedirectResponse(f"/ui/topics/{quote(name)}", status_code=303)

    @router.get("/topics/{topic}")
    async def topic_page(request: Request, topic: str) -> HTMLResponse:
        async with await cluster(request) as c:
            described = await c.describe_topic(topic)
            flags = {p["partition"]: p for p in c.partitions_of(topic)}
            return page(request, "topic.html", topic=described, flags=flags)

    @router.post("/topics/{topic}/config")
    async def alter_config(request: Request, topic: str) -> Response:
        cache.image.topic(topic)
        form = await _form(request)
        name = form.get("name", "").strip()
        if not name:
            raise ConsoleError(422, "name: a config name is required")
        # An empty value removes the override (back to the broker default).
        configs = _configs(f"{name}={form.get('value', '').strip()}")
        await admin.alter_topic_config(topic, configs, validate_only=True)
        if form.get("confirm") != "yes":
            value = configs[name]
            return page(
                request,
                "confirm.html",
                action=f"/ui/topics/{quote(topic)}/config",
                title=f"Change {name} of topic {topic}?",
                details=[f"{name} = {value}" if value else f"remove the override of {name} (back to the default)"],
                fields=form,
                cancel=f"/ui/topics/{quote(topic)}",
            )
        async with await cluster(request) as c:
            await c.call(c.self_id, "PATCH", f"/topics/{topic}", json={"configs": configs})
        return RedirectResponse(f"/ui/topics/{quote(topic)}", status_code=303)

    @router.post("/topics/{topic}/delete")
    async def delete_topic(request: Request, topic: str) -> Response:
        cache.image.topic(topic)
        form = await _form(request)
        if not config.delete_topic_enable:
            raise ConsoleError(403, "topic deletion is disabled on this broker (delete.topic.enable=false)")
        if form.get("confirm") != "yes":
            return page(
                request,
                "confirm.html",
                action=f"/ui/topics/{quote(topic)}/delete",
                title=f"Delete topic {topic}?",
                details=["Its partitions and all their records are deleted on every broker. This cannot be undone."],
                fields=form,
                cancel=f"/ui/topics/{quote(topic)}",
            )
        async with await cluster(request) as c:
            await c.call(c.self_id, "DELETE", f"/topics/{topic}")
        return RedirectResponse("/ui/topics", status_code=303)

    @router.get("/topics/{topic}/messages")
    async def messages(
        request: Request,
        topic: str,
        partition: str = "0",
        offset: str = "",
        time: str = "",
        render: str = "auto",
    ) -> HTMLResponse:
        """One page of a partition's records, from `offset`, from the first record at or
        after `time`, or else the last page."""
        if render not in RENDER_MODES:
            raise ConsoleError(422, f"render must be one of {', '.join(RENDER_MODES)}, not {render!r}")
        p = _int("partition", partition, 0)
        async with await cluster(request) as c:
            offsets = await c.offsets(topic, p)
            start, end = offsets.start, offsets.high_watermark
            notices = []
            if offsets.log_end > end:
                # acks=0/1 records a follower has not fetched yet: on the leader, not readable.
                notices.append(
                    f"offsets {end} to {offsets.log_end - 1} are written on the leader but not yet on every "
                    f"in-sync replica: they are shown once the high watermark ({end}) passes them"
                )
            if offset.strip():
                at = _int("offset", offset)
                if not start <= at <= offsets.log_end:
                    raise ConsoleError(
                        416, f"offset {at} is out of range: {topic}-{p} has offsets {start} to {offsets.log_end}"
                    )
            elif time.strip():
                found = await c.offset_for_time(topic, p, _timestamp_ms(time))
                if found is None:
                    notices.append(f"no record at or after {time} (UTC): showing the end of the partition")
                at = end if found is None else found
            else:
                at = max(start, end - PAGE_SIZE)
            records = await c.read_page(topic, p, at, PAGE_SIZE) if at < end else []
            rows = [
                {
                    "offset": r.offset,
                    "time": dt.datetime.fromtimestamp(r.timestamp / 1000, dt.UTC).isoformat(timespec="milliseconds"),
                    "key": render_bytes(r.key, render),
                    "value": render_bytes(r.value, render),
                    "headers": [(k, render_bytes(v, render)) for k, v in r.headers],
                }
                for r in records
            ]
            return page(
                request,
                "messages.html",
                topic=topic,
                partition=p,
                partitions=[q["partition"] for q in c.partitions_of(topic)],
                start=start,
                end=end,
                offset=at,
                time=time,
                render=render,
                modes=RENDER_MODES,
                rows=rows,
                notices=notices,
                previous=max(start, min(at, end) - PAGE_SIZE) if at > start else None,
                next=records[-1].offset + 1 if records and records[-1].offset + 1 < end else None,
                page_size=PAGE_SIZE,
            )

    # Groups ------------------------------------------------------------------------------

    @router.get("/groups")
    async def groups(request: Request) -> HTMLResponse:
        async with await cluster(request) as c:
            return page(request, "groups.html", groups=await c.groups())

    async def group_context(request: Request, group_id: str) -> dict[str, Any]:
        async with await cluster(request) as c:
            group, described = await c.describe_group(group_id)
        lags = [o["lag"] for o in described["offsets"] if o["lag"] is not None]
        history = lag_history.add(group_id, sum(lags))
        chart = line_chart("Total lag", "records", [Line("lag", "#9333ea", history)])
        return {"group": group, "described": described, "total_lag": sum(lags), "chart": chart}

    @router.get("/groups/{group_id}")
    async def group_page(request: Request, group_id: str) -> HTMLResponse:
        return page(request, "group.html", **await group_context(request, group_id))

    @router.get("/groups/{group_id}/lag")
    async def group_lag(request: Request, group_id: str) -> HTMLResponse:
        """The offsets table and lag chart, polled by the group page."""
        return page(request, "group_lag.html", **await group_context(request, group_id))

    # Metrics -----------------------------------------------------------------------------

    @router.get("/metrics")
    async def metrics(request: Request) -> HTMLResponse:
        return page(request, "metrics.html", enabled=broker_metrics is not None)

    @router.get("/metrics/charts")
    async def metric_charts(request: Request) -> HTMLResponse:
        """Bytes in/out and produce latency of this broker, polled by the metrics page."""
        if broker_metrics is None:
            raise ConsoleError(404, "metrics are disabled on this broker (metrics.enabled=false)")
        traffic.add(broker_metrics.exposition())
        return page(request, "metric_charts.html", charts=traffic.charts())

    return router
