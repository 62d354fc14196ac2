"""The web console in a real browser: Debian's headless Chromium driven by Selenium against a
broker process. Each page loads without browser console errors; a topic created from the UI
exists for Kafka clients; a record produced with confluent-kafka shows in the message
browser; a group's lag is the CLI's. One browser for the module; screenshots go to its tmp
dir, and to $LOGLAKE_CONSOLE_SCREENSHOTS too when set (scripts/console_screenshots.py).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from client_helpers import create_topic, unique_name
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from console_helpers import check_console, cli_lags, start_browser, table_cells
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from harness.process import BrokerProcess

pytestmark = pytest.mark.slow

# The screenshots docs/operations.md shows.
DOC_SHOTS = {"overview", "topic", "messages", "group", "metrics"}


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    driver = start_browser(tmp_path_factory.mktemp("chromium-profile"))
    yield driver
    driver.quit()


def visit(browser: WebDriver, url: str, shots: Path, name: str | None = None) -> str:
    """Load `url`, check the browser logged no error, save a screenshot; the page's HTML."""
    browser.get(url)
    WebDriverWait(browser, 10).until(lambda d: d.execute_script("return document.readyState") == "complete")
    check_console(browser, url)
    if name is not None:
        screenshot(browser, shots, name)
    return browser.page_source


def screenshot(browser: WebDriver, shots: Path, name: str) -> None:
    browser.save_screenshot(str(shots / f"{name}.png"))
    docs = os.environ.get("LOGLAKE_CONSOLE_SCREENSHOTS")
    if docs and name in DOC_SHOTS:
        shutil.copy(shots / f"{name}.png", Path(docs) / f"console-{name}.png")


def test_console_in_a_browser(broker: BrokerProcess, browser: WebDriver, shots: Path) -> None:
    ui = f"{broker.http_url}/ui"
    busy = unique_name("orders")
    create_topic(broker.bootstrap, busy, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        producer.produce(busy, key=f"customer-{i % 3}", value=f'{{"order": {i}, "total": {i * 2.5}}}', partition=i % 2)
    producer.produce(busy, key=b"\x00\x01", value=b"plain text value", headers=[("trace", b"abc")], partition=0)
    producer.flush(10)

    visit(browser, ui, shots, "overview")
    assert browser.find_element(By.ID, "controller").text == "broker 0"

    # Create a topic from the UI, through its confirmation page.
    made = unique_name("made-in-ui")
    visit(browser, f"{ui}/topics", shots, "topics")
    form = browser.find_element(By.ID, "create-topic")
    form.find_element(By.NAME, "name").send_keys(made)
    partitions = form.find_element(By.NAME, "partitions")
    partitions.clear()
    partitions.send_keys("3")
    form.find_element(By.NAME, "configs").send_keys("retention.ms=3600000")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "confirm"))
    check_console(browser, "the confirmation page")
    assert made not in AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10).topics
    browser.find_element(By.ID, "confirm").click()
    WebDriverWait(browser, 10).until(lambda d: d.current_url.endswith(f"/ui/topics/{made}"))
    check_console(browser, "the new topic's page")
    described = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(made, timeout=10).topics[made]
    assert described.error is None and len(described.partitions) == 3

    html = visit(browser, f"{ui}/topics/{busy}", shots, "topic")
    assert [row[6] for row in table_cells(html, "partitions")] == ["11", "10"]  # log end offsets

    # The record produced with confluent-kafka, in the message browser.
    html = visit(browser, f"{ui}/topics/{busy}/messages?partition=0", shots, "messages")
    rows = table_cells(html, "records")
    assert rows[-1][0] == "10" and rows[-1][2] == "hex00 01" and rows[-1][3] == "textplain text value"
    assert rows[-1][4] == "trace: textabc"
    assert '"order": 0' in rows[0][3]

    # A live consumer group with a committed position and lag.
    group = unique_name("billing")
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False, "client.id": "biller"}
    )
    try:
        consumer.subscribe([busy])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        consumer.commit(offsets=[TopicPartition(busy, 0, 4), TopicPartition(busy, 1, 9)], asynchronous=False)
        visit(browser, f"{ui}/groups", shots, "groups")
        visit(browser, f"{ui}/groups/{group}", shots)
        time.sleep(1)
        html = visit(browser, f"{ui}/groups/{group}", shots, "group")  # two samples: a line on the chart
        shown = {(row[0], int(row[1])): row[4] for row in table_cells(html, "offsets")}
        assert shown == cli_lags(broker.http_url, group) == {(busy, 0): "7", (busy, 1): "1"}
        assert browser.find_element(By.ID, "total-lag").text == "8"
    finally:
        consumer.close()

    # Live charts: htmx polls every 2 s; three samples make a line, a few more a chart worth a screenshot.
    visit(browser, f"{ui}/metrics", shots)
    for i in range(5):
        producer.produce(busy, value=b"x" * 2000, partition=0)
        producer.flush(10)
        time.sleep(1.5)
    WebDriverWait(browser, 15).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#charts polyline")) == 3)
    check_console(browser, "the metrics page")
    screenshot(browser, shots, "metrics")

    # Bad input: an error page with its status (the one error the browser logs), no stack trace.
    browser.get(f"{ui}/topics/{busy}/messages?partition=0&offset=999")
    assert "offset 999 is out of range" in browser.find_element(By.ID, "error-message").text
    assert "Traceback" not in browser.page_source
    logged = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert len(logged) == 1 and "status of 416" in logged[0], logged
    screenshot(browser, shots, "error")
