"""What a study writes is visible in optuna-dashboard, checked in a real headless Chromium (Selenium).

Skipped when Debian's chromium and chromedriver are absent. The study page must
show the study, the search grid and the trade-off figure; a trial's page its note,
constraint values and figures artifact; the History plot must draw infeasible
trials as infeasible (optuna-dashboard reads the constraints list the tuner
writes, not the per-key form of Optuna 5's ``set_constraint``). A screenshot is
kept in ``test-artifacts/``.
"""

from __future__ import annotations

import dataclasses
import json
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

from tests import PATIENCE
from tests.tuner.helpers import merged, write_study
from tuner import StudyConfig, best_feasible, is_feasible, named_constraints, open_study
from tuner.cli import main

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
    """A finished two-trial study, and the same fits rejudged against an ε target none meets
    (``dash-strict``), served by ``swagppm-tune dashboard``; yields its URL and study file."""
    folder = tmp_path_factory.mktemp("dashboard")
    tables = merged(study={"name": "dash", "n_trials": 2}, swagppm={**merged()["swagppm"],
                                                                     "cache_dir": str(folder / "cache")})
    path = write_study(folder / "dash.toml", tables)
    assert main(["run", str(path)]) in (0, 1)
    assert main(["rejudge", str(path), "--name", "dash-strict", "--epsilon", "0.001"]) in (0, 1)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tuner.cli", "dashboard", str(path), "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + PATIENCE
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
    server.wait(timeout=PATIENCE)


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


def page_text(driver: object, url: str, expected: str, timeout: float = PATIENCE) -> str:
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


def api_study(url: str, name: str) -> dict[str, object]:
    """The dashboard's JSON for the study ``name`` (what its History and Best widgets draw)."""
    studies = json.loads(urllib.request.urlopen(f"{url}/api/studies", timeout=10).read())["study_summaries"]
    (study_id,) = [s["study_id"] for s in studies if s["study_name"] == name]
    study: dict[str, object] = json.loads(urllib.request.urlopen(f"{url}/api/studies/{study_id}?after=0",
                                                                 timeout=10).read())
    return {**study, "study_id": study_id}


def history_points(driver: object, url: str, study_id: object) -> dict[str, int]:
    """The History plot's traces of the study page: trace name -> number of points drawn."""
    page_text(driver, f"{url}/dashboard/studies/{study_id}", "History")
    script = ("return [...document.querySelectorAll('.js-plotly-plot')].flatMap(e => (e.data || [])"
              ".filter(t => t.mode === 'markers').map(t => [t.name || '', (t.x || []).length]))")
    from selenium.webdriver.support.ui import WebDriverWait

    traces = WebDriverWait(driver, 60).until(lambda d: [t for t in d.execute_script(script)
                                                        if "Feasible" in t[0] or "Infeasible" in t[0]])
    return {name: count for name, count in traces}


@pytest.mark.parametrize("name", ["dash", "dash-strict"])
def test_the_history_plot_marks_infeasible_trials(dashboard: tuple[str, Path], browser: object, name: str) -> None:
    url, path = dashboard
    config = StudyConfig.from_toml(path)
    study = open_study(dataclasses.replace(config, study=dataclasses.replace(config.study, name=name)),
                       create=False)
    trials = study.get_trials(deepcopy=False)
    infeasible = [t for t in trials if t.values is not None and not is_feasible(t)]
    if name == "dash-strict":
        assert len(infeasible) == len(trials) == 2  # rejudged at epsilon 0.001, none is feasible
    served = api_study(url, name)
    for trial, shown in zip(trials, served["trials"], strict=True):  # type: ignore[call-overload]
        assert shown["constraints"] == list(named_constraints(trial).values())
    points = history_points(browser, url, served["study_id"])
    assert points.get(f"Infeasible Trial of {name}", 0) == len(infeasible)
