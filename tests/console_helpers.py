"""The web console in tests: a headless browser, its HTML, and what the `loglake` CLI prints to compare it with."""

from __future__ import annotations

import html as html_lib
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

CHROME_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1200,900",
)


def start_browser(profile: Path) -> Any:
    """Debian's headless Chromium under Selenium, with a fresh profile; its console log kept."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(30)
    return driver


def check_console(browser: Any, url: str) -> None:
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, f"browser console errors on {url}: {errors}"


def table_cells(html: str, table_id: str) -> list[list[str]]:
    """The text of each data row's cells of the table with that id (entities decoded)."""
    table = re.search(rf'<table id="{table_id}">(.*?)</table>', html, re.S)
    assert table, f"no table {table_id}"
    rows = re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)
    text = [
        [html_lib.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
        for r in rows
    ]
    return [r for r in text if r]


def error_message(html: str) -> str:
    found = re.search(r'id="error-message">(.*?)</div>', html, re.S)
    assert found, html[:500]
    return found.group(1)


def cli_describe_group(http_url: str, group: str) -> str:
    """What `loglake groups describe --group` prints against that broker."""
    return subprocess.run(
        [sys.executable, "-m", "loglake.cli", "groups", "describe", "--group", group, "--bootstrap-http", http_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout


def cli_lags(http_url: str, group: str) -> dict[tuple[str, int], str]:
    """(topic, partition) -> the LAG column of `loglake groups describe --group` against that broker."""
    out = cli_describe_group(http_url, group)
    lags = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 6 and cols[0] == group:
            lags[(cols[1], int(cols[2]))] = cols[5]
    return lags
