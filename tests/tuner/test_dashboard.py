"""What a study writes is visible in optuna-dashboard, checked in a real headless Chromium (Selenium).

Skipped when Debian's chromium and chromedriver are absent. The study page must
show the study, the search grid and the trade-off figure; a trial's page its note,
constraint values and figures artifact. A screenshot is kept in ``test-artifacts/``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tuner.conftest import merged, write_study
from tuner import StudyConfig, best_feasible, open_study
from tuner._cli import main

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "test-artifacts"
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (test extra)")
pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                reason="Debian's chromium and chromium-driver are not installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A finished two-trial study served by ``swagppm-tune dashboard``; yields its URL and study file."""
    folder = tmp_path_factory.mktemp("dashboard")
    tables = merged(study={"name": "dash", "n_trials": 2}, swagppm={**merged()["swagppm"],
                                                                     "cache_dir": str(folder / "cache")})
    path = write_study(folder / "dash.toml", tables)
    assert main(["run", str(path)]) in (0, 1)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tuner._cli", "dashboard", str(path), "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            urllib.request.urlopen(f"{url}/api/studies", timeout=2).read()
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail(f"the dashboard did not start: {server.communicate()[0]}")
            time.sleep(0.5)
    yield url, path
    server.terminate()
    server.wait(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager look for drivers online
    options = Options()
    options.binary_location = CHROMIUM  # type: ignore[assignment]
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
                 "--disable-dev-shm-usage"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def page_text(driver: object, url: str, expected: str, timeout: float = 60) -> str:
    """Open ``url`` and wait until the rendered page shows ``expected``; returns the page's text."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)  # type: ignore[attr-defined]
    WebDriverWait(driver, timeout).until(lambda d: expected in d.find_element(By.TAG_NAME, "body").text)
    return driver.find_element(By.TAG_NAME, "body").text  # type: ignore[attr-defined]


def test_the_study_page_shows_the_grid_and_trade_off(dashboard: tuple[str, Path], browser: object) -> None:
    url, path = dashboard
    text = page_text(browser, f"{url}/dashboard/studies/1", "search over (c, fine-tuning epochs)")
    assert "dash" in text and "privacy–utility trade-off" in text
    assert "caveats" in text and "epsilon is a local, data-dependent bound" in text
    browser.execute_script(  # type: ignore[attr-defined]
        "[...document.querySelectorAll('.js-plotly-plot')]"
        ".find(e => e.textContent.includes('search over')).scrollIntoView()")
    SCREENSHOTS.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOTS / "dashboard-study.png"))  # type: ignore[attr-defined]


def test_a_trial_page_shows_its_note_constraints_and_figures(dashboard: tuple[str, Path], browser: object) -> None:
    url, path = dashboard
    study = open_study(StudyConfig.from_toml(path), create=False)
    trial = best_feasible(study) or study.trials[0]
    text = page_text(browser, f"{url}/dashboard/studies/1/trials?numbers={trial.number}",
                     "Next (the guide's flowchart)")
    assert f"Trial {trial.number}: {trial.user_attrs['diagnosis'].replace('_', ' ')}" in text
    assert trial.user_attrs["recommendation"] in text
    for key in ("constraint_epsilon", "constraint_f1_macro", "constraint_fit_spread", "feasible", "epsilon"):
        assert key in text
    assert f"trial-{trial.number}-figures.json" in text
