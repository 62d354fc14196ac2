"""Scraping a broker's /metrics in tests: the exposition parsed by prometheus_client's parser."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Scrape:
    """Every sample of one scrape, by name and labels."""

    samples: dict[tuple[str, frozenset[tuple[str, str]]], float]

    def get(self, name: str, **labels: object) -> float | None:
        return self.samples.get((name, frozenset((k, str(v)) for k, v in labels.items())))

    def value(self, name: str, **labels: object) -> float:
        """A sample that must be there; 0 for a labelled counter child not created yet."""
        found = self.get(name, **labels)
        if found is None:
            if labels and name.endswith(("_total", "_count", "_sum", "_bucket")):
                return 0.0
            raise AssertionError(f"no sample {name}{labels}")
        return found

    def names(self) -> set[str]:
        return {name for name, _ in self.samples}


def scrape(http_url: str) -> Scrape:
    r = httpx.get(f"{http_url}/metrics", timeout=10)
    r.raise_for_status()
    assert r.headers["content-type"].startswith("text/plain"), r.headers
    samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return Scrape(samples)
