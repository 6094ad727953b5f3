"""The explorer in a real headless browser (Debian's chromium through Selenium and /usr/bin/chromedriver).

One scenario, as a user would go: log in, open the seeded agent, follow its entity, read a
superseded fact's history, run a retrieve, re-drive a failed event; then the other actions:
delete a fact (after the confirmation), run a maintenance job, follow an import to its end. A
screenshot of every page is written under the test run's temp folder. The XSS payload a message
carried shows as text and never runs.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from tests.support.api_server import TEST_API_KEY, auth_headers
from tests.ui.conftest import START, UiStack, send, wait_for_event

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):  # pragma: no cover - ./ops/test installs them
    pytest.fail(
        f"{CHROMIUM} and {CHROMEDRIVER} are needed (apt-get install chromium chromium-driver; ./ops/test does it)",
        pytrace=False,
    )

os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager download a driver

from selenium import webdriver  # noqa: E402 - after SE_OFFLINE is set
from selenium.common.exceptions import (  # noqa: E402
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """A headless chromium, quit at the end whatever happens."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1000",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        driver.set_page_load_timeout(60)
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the pages' screenshots go (printed, so a run's report can point at them)."""
    folder = tmp_path_factory.mktemp("ui-screenshots")
    print(f"screenshots in {folder}")
    return folder


def wait_for(driver: WebDriver, condition: Callable[[WebDriver], object], timeout_s: float = 20) -> None:
    # An element read while the page is being replaced goes stale: look again until the new page holds.
    def settled(current: WebDriver) -> object:
        try:
            return condition(current)
        except WebDriverException as error:
            # Chromium may report such an element as a node outside the document rather than stale.
            if "does not belong to the document" in (error.msg or ""):
                return False
            raise

    WebDriverWait(driver, timeout_s, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)).until(
        settled
    )


def shoot(driver: WebDriver, folder: Path, name: str) -> None:
    driver.save_screenshot(str(folder / f"{name}.png"))


def test_a_user_explores_memory(browser: WebDriver, ui_stack: UiStack, screenshots: Path) -> None:
    base, agent = ui_stack.base_url, ui_stack.agent_id

    # Anything but the login page sends the browser to log in first.
    browser.get(f"{base}/ui/")
    wait_for(browser, expected_conditions.presence_of_element_located((By.ID, "api_key")))
    assert "/ui/login?next=" in browser.current_url
    shoot(browser, screenshots, "01-login")
    browser.find_element(By.ID, "api_key").send_keys("wrong-key")
    browser.find_element(By.ID, "login-submit").click()
    wait_for(browser, expected_conditions.presence_of_element_located((By.ID, "login-error")))
    assert "invalid API key" in browser.find_element(By.ID, "login-error").text
    browser.find_element(By.ID, "api_key").send_keys(TEST_API_KEY)
    browser.find_element(By.ID, "login-submit").click()
    wait_for(browser, expected_conditions.presence_of_element_located((By.ID, "find-agent")))
    # The shared test database holds many agents: find this one as a user with many would.
    browser.find_element(By.ID, "find").send_keys(agent)
    browser.find_element(By.ID, "find-submit").click()
    # The list before the search has the same id: wait for the one that names the agent.
    wait_for(browser, lambda driver: agent in driver.find_element(By.ID, "agents").text)
    # The cookie is not the script's to read.
    assert "arandu_ui" not in str(browser.execute_script("return document.cookie"))
    shoot(browser, screenshots, "02-agents")

    # The agent: its entities, recent facts and events; the XSS payload is text, never code.
    browser.find_element(By.LINK_TEXT, agent).click()
    wait_for(browser, expected_conditions.presence_of_element_located((By.ID, "entity-names")))
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "Ana moved to Porto." in body
    assert '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">' in body
    assert browser.execute_script("return typeof window.__xss") == "undefined"
    shoot(browser, screenshots, "03-agent")

    # The entity: the active fact, and in its history the superseded one with window and speaker.
    browser.find_element(By.CSS_SELECTOR, "#entity-names a[href$='person%3Aana']").click()
    wait_for(browser, expected_conditions.presence_of_element_located((By.ID, "active-facts")))
    active = browser.find_element(By.ID, "active-facts").text
    assert "Ana moved to Porto." in active
    history = browser.find_element(By.CSS_SELECTOR, "#active-facts ol.superseded").text
    assert "Ana lives in Lisbon." in history
    assert "valid 2024-03-01 09:00:00 UTC → 2024-03-31 09:00:00 UTC" in history
    assert "speaker: Ana" in history
    assert "I live in Lisbon." in history  # its source message
    assert browser.find_elements(By.CSS_SELECTOR, "svg#graph")
    browser.set_window_size(1280, 1750)  # the whole entity page: profile, graph, facts and history
    shoot(browser, screenshots, "04-entity")
    browser.set_window_size(1280, 1000)

    # Time travel: on 2024-03-15 Ana still lived in Lisbon.
    field = browser.find_element(By.ID, "as-of-input")
    field.clear()
    field.send_keys("2024-03-15T12:00:00+00:00")
    field.submit()
    wait_for(browser, lambda driver: "Ana lives in Lisbon." in driver.find_element(By.ID, "active-facts").text)
    assert "Ana moved to Porto." not in browser.find_element(By.ID, "active-facts").text
    shoot(browser, screenshots, "05-entity-as-of")

    # The retrieve playground: context, the score breakdown, the trace.
    browser.get(f"{base}/ui/agents/{agent}/retrieve")
    browser.find_element(By.ID, "query").send_keys("Which city does Ana live in?")
    browser.find_element(By.ID, "retrieve-submit").click()
    wait_for(browser, expected_conditions.presence_of_element_located((By.ID, "context")))
    assert "Porto" in browser.find_element(By.ID, "context").text
    scores = browser.find_element(By.ID, "scored-facts").text
    assert "semantic" in scores
    assert "Ana moved to Porto." in scores
    assert browser.find_elements(By.ID, "trace")
    shoot(browser, screenshots, "06-retrieve")

    # The failed event: its error, then a confirmed re-drive (with the embedder healed) gets it done.
    browser.get(f"{base}/ui/agents/{agent}/events?status=failed")
    row = f"tr[data-event-id='{ui_stack.failed_event_id}']"
    wait_for(browser, expected_conditions.presence_of_element_located((By.CSS_SELECTOR, row)))
    assert (
        "the embedding provider refused the text" in browser.find_element(By.CSS_SELECTOR, f"{row} .event-error").text
    )
    assert browser.find_element(By.CSS_SELECTOR, f"{row} .status").text == "failed"
    shoot(browser, screenshots, "07-events-failed")
    ui_stack.healed.set()
    browser.find_element(By.CSS_SELECTOR, f"{row} button.redrive").click()
    wait_for(browser, expected_conditions.alert_is_present())
    browser.switch_to.alert.accept()
    wait_for(browser, expected_conditions.presence_of_element_located((By.ID, "notice")))
    deadline = time.monotonic() + 60
    while True:
        browser.get(f"{base}/ui/agents/{agent}/events")
        status = browser.find_element(By.CSS_SELECTOR, f"{row} .status").text
        if status == "done":
            break
        assert time.monotonic() < deadline, f"the re-driven event is still {status}"
        time.sleep(0.3)
    shoot(browser, screenshots, "08-events-after-redrive")

    for page in ("entities", "imports", "jobs"):
        browser.get(f"{base}/ui/agents/{agent}/{page}")
        wait_for(browser, expected_conditions.presence_of_element_located((By.TAG_NAME, "h1")))
        shoot(browser, screenshots, f"09-{page}")
    assert browser.execute_script("return typeof window.__xss") == "undefined"
    assert len(list(screenshots.glob("*.png"))) >= 11


def log_in(driver: WebDriver, base: str, key: str = TEST_API_KEY) -> None:
    """Log the browser in with ``key`` (whatever session it had before)."""
    driver.get(f"{base}/ui/login")
    wait_for(driver, expected_conditions.presence_of_element_located((By.ID, "api_key")))
    driver.find_element(By.ID, "api_key").send_keys(key)
    driver.find_element(By.ID, "login-submit").click()
    wait_for(driver, expected_conditions.presence_of_element_located((By.ID, "agents")))


def confirm_and_wait(driver: WebDriver) -> None:
    """Accept the page's confirmation dialog."""
    wait_for(driver, expected_conditions.alert_is_present())
    driver.switch_to.alert.accept()


def test_a_user_deletes_a_fact(browser: WebDriver, ui_stack: UiStack, screenshots: Path) -> None:
    base = ui_stack.base_url
    agent = f"ui-del-{uuid.uuid4().hex[:8]}"  # an agent of its own: the other tests keep their facts
    with httpx.Client(base_url=base, headers=auth_headers(), timeout=30) as api:
        assert wait_for_event(api, send(api, agent, "I like green tea.", START)) == "done"
        assert wait_for_event(api, send(api, agent, "I play the cello.", START + timedelta(days=1))) == "done"
        facts = {fact["fact_text"]: fact["fact_id"] for fact in api.get(f"/v1/agents/{agent}/facts").json()["facts"]}
        doomed = next(fact_id for text_, fact_id in facts.items() if "tea" in text_)
        kept = next(fact_id for text_, fact_id in facts.items() if "cello" in text_)

        log_in(browser, base)
        browser.get(f"{base}/ui/agents/{agent}/entities/person%3Aana")
        row = f"#active-facts li.fact:has(div[data-fact-id='{doomed}'])"
        wait_for(browser, expected_conditions.presence_of_element_located((By.CSS_SELECTOR, row)))
        shoot(browser, screenshots, "10-entity-before-delete")
        # Dismissing the dialog deletes nothing.
        browser.find_element(By.CSS_SELECTOR, f"{row} button.danger").click()
        wait_for(browser, expected_conditions.alert_is_present())
        browser.switch_to.alert.dismiss()
        assert api.get(f"/v1/agents/{agent}/facts/{doomed}").status_code == 200
        browser.find_element(By.CSS_SELECTOR, f"{row} button.danger").click()
        confirm_and_wait(browser)
        wait_for(browser, lambda driver: not driver.find_elements(By.CSS_SELECTOR, row))
        wait_for(browser, expected_conditions.presence_of_element_located((By.ID, "active-facts")))
        assert browser.find_elements(By.CSS_SELECTOR, f"#active-facts div[data-fact-id='{kept}']")
        shoot(browser, screenshots, "11-entity-after-delete")
        # The JSON API agrees: the fact is gone, the other one stays.
        assert api.get(f"/v1/agents/{agent}/facts/{doomed}").status_code == 404
        assert api.get(f"/v1/agents/{agent}/facts/{kept}").status_code == 200


def test_an_admin_runs_a_job_from_the_jobs_page(browser: WebDriver, ui_stack: UiStack, screenshots: Path) -> None:
    base, agent = ui_stack.base_url, ui_stack.agent_id
    log_in(browser, base)
    browser.get(f"{base}/ui/agents/{agent}/jobs?job=importance")
    button = "form[action$='/jobs/importance'] button"
    wait_for(browser, expected_conditions.presence_of_element_located((By.CSS_SELECTOR, button)))
    before = len(browser.find_elements(By.CSS_SELECTOR, "#job-runs tr.status-done"))
    browser.find_element(By.CSS_SELECTOR, button).click()
    confirm_and_wait(browser)
    wait_for(browser, expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "p.notice")))
    assert browser.find_element(By.CSS_SELECTOR, "p.notice").text == "The job was queued."
    # The run is listed at once (queued or running), then done: the page refreshes itself meanwhile.
    first = browser.find_element(By.CSS_SELECTOR, "#job-runs tbody tr")
    assert first.get_attribute("class") in ("status-queued", "status-running", "status-done")
    assert "importance" in first.text
    deadline = time.monotonic() + 60
    while len(browser.find_elements(By.CSS_SELECTOR, "#job-runs tr.status-done")) <= before:
        assert time.monotonic() < deadline, browser.find_element(By.ID, "job-runs").text
        time.sleep(0.5)
        browser.get(f"{base}/ui/agents/{agent}/jobs?job=importance")
    latest = browser.find_element(By.CSS_SELECTOR, "#job-runs tbody tr")
    assert "importance" in latest.text
    assert "api" in latest.text  # the trigger: run from here, not by Beat
    shoot(browser, screenshots, "12-jobs-after-run")


def test_an_import_shows_its_progress_until_done(browser: WebDriver, ui_stack: UiStack, screenshots: Path) -> None:
    base = ui_stack.base_url
    agent = f"ui-imp-{uuid.uuid4().hex[:8]}"
    messages = [
        {
            "message": f"Day {day}: I walked {day} km.",
            "speaker_name": "Ana",
            "occurred_at": (START + timedelta(days=day)).isoformat(),
        }
        for day in range(1, 6)
    ]
    with httpx.Client(base_url=base, headers=auth_headers(), timeout=30) as api:
        accepted = api.post(f"/v1/agents/{agent}/imports", json={"messages": messages})
        assert accepted.status_code == 202, accepted.text
        import_id = accepted.json()["import_id"]
    log_in(browser, base)
    browser.get(f"{base}/ui/agents/{agent}/imports")
    wait_for(browser, expected_conditions.presence_of_element_located((By.ID, "imports")))
    row = browser.find_element(By.XPATH, f"//table[@id='imports']//tr[td[normalize-space()='{import_id}']]")
    assert row.get_attribute("class") in ("status-running", "status-done")
    assert browser.find_elements(By.CSS_SELECTOR, "#imports progress")
    shoot(browser, screenshots, "13-import-progress")
    deadline = time.monotonic() + 60
    while True:
        row = browser.find_element(By.XPATH, f"//table[@id='imports']//tr[td[normalize-space()='{import_id}']]")
        if row.get_attribute("class") == "status-done":
            break
        assert time.monotonic() < deadline, row.text
        time.sleep(0.5)
        browser.get(f"{base}/ui/agents/{agent}/imports")
    cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
    # done, failed, pending, duplicates, status
    assert cells[4:9] == ["5", "0", "0", "0", "done"], cells
    progress = row.find_element(By.TAG_NAME, "progress")
    assert progress.get_attribute("value") == progress.get_attribute("max") == "5"
    assert not browser.find_elements(By.CSS_SELECTOR, "p.live")  # it stops refreshing itself
    shoot(browser, screenshots, "14-import-done")


def test_the_overview_shows_the_agents_config_overrides(
    browser: WebDriver, ui_stack: UiStack, screenshots: Path
) -> None:
    base = ui_stack.base_url
    agent = f"ui-cfg-{uuid.uuid4().hex[:8]}"
    service = ui_stack.settings.memory
    with httpx.Client(base_url=base, headers=auth_headers(), timeout=30) as api:
        put = api.put(f"/v1/agents/{agent}/config", json={"overrides": {"topk_facts": 7, "min_confidence": 0.4}})
        assert put.status_code == 200, put.text

        log_in(browser, base)
        browser.get(f"{base}/ui/agents/{agent}")
        wait_for(browser, expected_conditions.presence_of_element_located((By.ID, "config-overrides")))
        rows = [
            [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in browser.find_elements(By.CSS_SELECTOR, "#config-overrides tbody tr")
        ]
        # Each override beside the value the agent's work runs on and the service's own.
        assert rows == [
            ["min_confidence", "0.4", "0.4", str(service.min_confidence)],
            ["topk_facts", "7", "7", str(service.topk_facts)],
        ]
        assert not browser.find_elements(By.ID, "config-refused")
        shoot(browser, screenshots, "15-agent-config")

        # Removed through the API: the panel says the agent runs on the service config.
        assert api.delete(f"/v1/agents/{agent}/config").status_code == 200
        browser.get(f"{base}/ui/agents/{agent}")
        wait_for(browser, expected_conditions.presence_of_element_located((By.ID, "config-none")))
        assert not browser.find_elements(By.ID, "config-overrides")
