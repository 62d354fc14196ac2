"""What the console's pages show beyond plain numbers: record bytes as JSON, text or hex;
small line charts as inline SVG; and the bounded histories behind the live charts."""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import orjson
from markupsafe import Markup, escape
from prometheus_client.parser import text_string_to_metric_families

RENDER_MODES = ("auto", "json", "text", "hex")
# Samples a chart keeps: at one poll every 2-5 s, a few minutes of history.
HISTORY_LENGTH = 120
# Groups whose lag history is kept; the least recently viewed is dropped first.
MAX_LAG_HISTORIES = 64


@dataclass(frozen=True)
class Rendered:
    """Bytes as shown: `kind` is json, text, hex or null."""

    kind: str
    text: str


def render_bytes(data: bytes | None, mode: str) -> Rendered:
    """`auto` shows valid JSON pretty-printed, else UTF-8 text without control characters,
    else hex; `json` and `text` fall back to hex for bytes that are not that."""
    if data is None:
        return Rendered("null", "null")
    if mode in ("auto", "json"):
        try:
            return Rendered("json", orjson.dumps(orjson.loads(data), option=orjson.OPT_INDENT_2).decode())
        except orjson.JSONDecodeError:
            pass
    if mode in ("auto", "json", "text"):
        try:
            text = data.decode()
            if mode == "text" or all(c.isprintable() or c in "\n\t\r" for c in text):
                return Rendered("text", text)
        except UnicodeDecodeError:
            pass
    return Rendered("hex", data.hex(" "))


@dataclass(frozen=True)
class Line:
    label: str
    color: str
    points: list[tuple[float, float]]  # (unix seconds, value)


def line_chart(title: str, unit: str, lines: list[Line], width: int = 640, height: int = 160) -> Markup:
    """An SVG chart of `lines` over their common time span, the y axis from 0 to the maximum."""
    left, right, top, bottom = 60, 10, 20, 20
    points = [pt for line in lines for pt in line.points]
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>',
        f'<text x="{left}" y="14" class="chart-title">{escape(title)}</text>',
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" class="axis"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" class="axis"/>',
    ]
    if max((len(line.points) for line in lines), default=0) < 2:
        parts.append(f'<text x="{left + 10}" y="{height // 2}" class="chart-note">collecting samples…</text>')
    else:
        t0, t1 = min(t for t, _ in points), max(t for t, _ in points)
        top_value = max(v for _, v in points) or 1.0
        span = (t1 - t0) or 1.0

        def x(t: float) -> float:
            return left + (t - t0) / span * (width - left - right)

        def y(v: float) -> float:
            return height - bottom - v / top_value * (height - top - bottom)

        parts.append(f'<text x="{left - 4}" y="{top + 4}" class="tick" text-anchor="end">{_short(top_value)}</text>')
        parts.append(f'<text x="{left - 4}" y="{height - bottom}" class="tick" text-anchor="end">0</text>')
        parts.append(
            f'<text x="{width - right}" y="{height - 4}" class="tick" text-anchor="end">last {span:.0f} s ({escape(unit)})</text>'
        )
        for line in lines:
            coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in line.points)
            parts.append(f'<polyline fill="none" stroke="{line.color}" stroke-width="2" points="{coords}"/>')
    legend = "".join(f'<tspan fill="{line.color}"> ■ {escape(line.label)}</tspan>' for line in lines)
    parts.append(f'<text x="{width - right}" y="14" text-anchor="end" class="legend">{legend}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _short(value: float) -> str:
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= limit:
            return f"{value / limit:.1f}{suffix}"
    return f"{value:.3g}"


@dataclass(frozen=True)
class TrafficSample:
    at: float
    bytes_in: float
    bytes_out: float
    produce_seconds: float  # the sum of the Produce request latencies
    produces: float


def traffic_sample(exposition: bytes, at: float) -> TrafficSample:
    """This broker's byte counters and Produce latency totals, read from its Prometheus exposition."""
    totals = {"in": 0.0, "out": 0.0, "seconds": 0.0, "count": 0.0}
    for family in text_string_to_metric_families(exposition.decode()):
        for s in family.samples:
            if s.name == "kafka_server_broker_topic_bytes_in_total":
                totals["in"] += s.value
            elif s.name == "kafka_server_broker_topic_bytes_out_total":
                totals["out"] += s.value
            elif s.name.startswith("kafka_network_request_total_time_seconds") and s.labels.get("request") == "Produce":
                if s.name.endswith("_sum"):
                    totals["seconds"] = s.value
                elif s.name.endswith("_count"):
                    totals["count"] = s.value
    return TrafficSample(at, totals["in"], totals["out"], totals["seconds"], totals["count"])


@dataclass
class TrafficHistory:
    """Samples taken when the live charts poll (at most one per `min_interval` seconds,
    however many viewers), turned into rates between consecutive samples."""

    min_interval: float = 1.0
    samples: deque[TrafficSample] = field(default_factory=lambda: deque(maxlen=HISTORY_LENGTH))

    def add(self, exposition: bytes, now: float | None = None) -> None:
        now = time.time() if now is None else now
        if self.samples and now - self.samples[-1].at < self.min_interval:
            return
        self.samples.append(traffic_sample(exposition, now))

    def charts(self) -> list[Markup]:
        pairs = list(zip(self.samples, list(self.samples)[1:]))
        bytes_in = [(b.at, max(0.0, (b.bytes_in - a.bytes_in) / (b.at - a.at))) for a, b in pairs]
        bytes_out = [(b.at, max(0.0, (b.bytes_out - a.bytes_out) / (b.at - a.at))) for a, b in pairs]
        # The mean latency of the Produce requests answered between two samples.
        latency = [
            (b.at, (b.produce_seconds - a.produce_seconds) / (b.produces - a.produces) * 1000)
            for a, b in pairs
            if b.produces > a.produces
        ]
        return [
            line_chart(
                "Bytes in / out per second",
                "bytes/s",
                [Line("in", "#2563eb", bytes_in), Line("out", "#16a34a", bytes_out)],
            ),
            line_chart("Produce latency (mean, Kafka protocol)", "ms", [Line("produce", "#dc2626", latency)]),
        ]


@dataclass
class LagHistory:
    """Each viewed group's total lag, sampled when its page polls."""

    groups: OrderedDict[str, deque[tuple[float, float]]] = field(default_factory=OrderedDict)

    def add(self, group_id: str, total_lag: int, now: float | None = None) -> list[tuple[float, float]]:
        history = self.groups.pop(group_id, None) or deque(maxlen=HISTORY_LENGTH)
        self.groups[group_id] = history
        while len(self.groups) > MAX_LAG_HISTORIES:
            self.groups.popitem(last=False)
        history.append((time.time() if now is None else now, float(total_lag)))
        return list(history)
