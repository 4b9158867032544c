"""What a study writes is visible in optuna-dashboard, checked in a real headless Chromium (Selenium).

The browser tests skip when Debian's chromium and chromedriver are absent. The
study page must show the study, the search grid, the trade-off figure and the
feasibility table; a trial's page its note (feasibility first), constraint values
and its figures rendered as a picture; the History plot must draw infeasible
trials as infeasible (optuna-dashboard reads the constraints list the tuner
writes, not the per-key form of Optuna 5's ``set_constraint``). Screenshots are
kept in ``test-artifacts/``. The note, table and picture are also checked as data.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
import pytest

from tests import PATIENCE
from tests.tuner.helpers import merged, result, tight, write_study
from tuner import StudyConfig, best_feasible, open_study
from tuner.cli import main
from tuner.dashboard import OWNER_SIDE, PICTURE_ALT, DashboardView, feasibility_table, figures_svg, trial_note
from tuner.outcome import judge
from tuner.queries import is_feasible
from tuner.record import TrialRecord, named_constraints

pytestmark = pytest.mark.fits

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "test-artifacts"
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


def needs_browser(test: Callable[..., None]) -> Callable[..., None]:
    """A test in the services lane, skipped without Debian's chromium and chromedriver."""
    skip = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                              reason="Debian's chromium and chromium-driver are not installed")
    return pytest.mark.services(skip(test))


def _outcome(series: list[float], tmp_path: Path, **fields: object):  # type: ignore[no-untyped-def]
    config = StudyConfig.from_toml(write_study(tmp_path / "s.toml", merged(targets={"epsilon_cap": 10.0})))
    return judge(result(series, **fields), targets=config.targets, search=config.search), config


def test_the_note_leads_with_feasibility_and_explains_each_constraint(tmp_path: Path) -> None:
    outcome, _ = _outcome(tight(3.0, n=60), tmp_path)
    note = trial_note(4, outcome)
    assert note.splitlines()[2] == "**feasible: yes** — violated: nothing"
    constraint = outcome.constraints["epsilon"]
    assert f"- epsilon = {constraint:+.3f} (met): ε / target − 1: above 0, ε exceeds the target" in note
    assert constraint == pytest.approx(2 * max(tight(3.0, n=60)) / 10 - 1)
    assert "an estimate from finitely many posterior draws, not a bound" in note
    assert "swagppm-tune explain WORD" in note and "docs/" not in note
    strict, _ = _outcome(tight(6.0, n=60), tmp_path)
    assert trial_note(5, strict).splitlines()[2] == "**feasible: no** — violated: epsilon"


def test_the_figures_picture_is_svg_with_the_series_and_the_f1_draws(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ElementTree

    outcome, config = _outcome([0.005 + 0.0001 * (i % 5) for i in range(60)], tmp_path)
    svg = figures_svg(outcome.record(), config)
    root = ElementTree.fromstring(svg)
    circles = root.findall("{http://www.w3.org/2000/svg}circle")
    assert len(circles) == 60 + 2 * 30  # every privacy draw and every F1 draw of both metrics
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "↑ ε target / 2 = 5.00 (above the plot, 926× the largest draw)" in texts  # the series keeps its scale
    cy = [float(c.get("cy") or 0) for c in circles[:60]]
    assert max(cy) - min(cy) > 150  # spread over the panel, not a flat row


def test_the_feasibility_table_has_a_row_per_trial(tmp_path: Path) -> None:
    import optuna

    from tuner.objective import record_outcome

    study = optuna.create_study()
    outcome, _ = _outcome(tight(3.0, n=60), tmp_path)
    trial = study.ask({"c": optuna.distributions.FloatDistribution(0.1, 2), "ft_epochs":
                       optuna.distributions.IntDistribution(1, 10)})
    record_outcome(trial, outcome, storage=study._storage)
    study.tell(trial, 6.0)
    table = feasibility_table(study).data[0]
    assert list(table.header.values) == ["trial", "c", "E", "ε", "F1", "verdict", "feasible", "violated"]
    assert [column[0] for column in table.cells.values][5:] == ["well_fit", "yes", "-"]


def test_the_view_shows_each_trial_s_named_columns_and_passes_everything_else_through(tmp_path: Path) -> None:
    import optuna

    from tuner.objective import record_outcome

    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    space = {"c": optuna.distributions.FloatDistribution(0.1, 2),
             "ft_epochs": optuna.distributions.IntDistribution(1, 10)}
    for series in (tight(3.0, n=60), tight(6.0, n=60)):  # epsilon about 6.1 (feasible), then about 12.3 (not)
        outcome, _ = _outcome(series, tmp_path)
        trial = study.ask(space)
        record_outcome(trial, outcome, storage=study._storage)
        study.tell(trial, outcome.objective_values("epsilon"))
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, params={"c": 1.0, "ft_epochs": 2},
                                              distributions=space, user_attrs={"failure": "RuntimeError: boom"}))
    view = DashboardView(study._storage, statistic="median")  # type: ignore[abstract]
    feasible, missed, failed = view.get_all_trials(study._study_id, deepcopy=False)
    record = TrialRecord.of(study.trials[0])
    assert record is not None and record.epsilon is not None and record.f1_macro_median is not None
    assert feasible.user_attrs == {"feasible": "yes", "violation": 0.0, "epsilon": round(record.epsilon, 4),
                                   "f1_macro_median": round(record.f1_macro_median, 4),
                                   "f1_weighted_median": round(record.f1_weighted_median or 0.0, 4),
                                   "diagnosis": "well_fit", "violated": "-"}
    assert missed.user_attrs["feasible"] == "no" and missed.user_attrs["violated"].startswith("epsilon +0.2")
    assert missed.user_attrs["violation"] == pytest.approx(named_constraints(study.trials[1])["epsilon"], abs=1e-4)
    assert failed.user_attrs == {"feasible": "no", "failure": "RuntimeError: boom"}
    assert view.get_trial(feasible._trial_id).user_attrs == feasible.user_attrs
    assert view.get_trial_user_attrs(feasible._trial_id) == feasible.user_attrs
    assert view.get_best_trial(study._study_id).user_attrs == feasible.user_attrs
    assert "max_delta_series" in study.trials[0].user_attrs  # the storage keeps every aggregate
    view.set_study_user_attr(study._study_id, "seen", 1)  # writes reach the storage
    assert study.user_attrs["seen"] == 1 and "privacy" not in study.user_attrs
    (shown,) = view.get_all_studies()
    assert list(shown.user_attrs)[:2] == ["privacy", "seen"] and shown.user_attrs["privacy"] == OWNER_SIDE
    assert view.get_study_user_attrs(study._study_id)["privacy"] == OWNER_SIDE
    assert view.get_n_trials(study._study_id) == 3 and view.get_best_trial(study._study_id).number == 0
    assert view.get_trial_id_from_study_id_trial_number(study._study_id, 2) == failed._trial_id


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


TOKENS: dict[str, str] = {}  # the dashboard's URL -> its run's token (read from the line it printed)


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A finished two-trial study, and the same fits rejudged against an ε target none meets
    (``dash-strict``), served by ``swagppm-tune dashboard``; yields its URL and study file (its token in
    ``TOKENS``)."""
    folder = tmp_path_factory.mktemp("dashboard")
    tables = merged(study={"name": "dash", "n_trials": 2}, swagppm={**merged()["swagppm"],
                                                                     "cache_dir": str(folder / "cache")})
    path = write_study(folder / "dash.toml", tables)
    assert main(["run", str(path)]) in (0, 1)
    assert main(["rejudge", str(path), "--name", "dash-strict", "--epsilon-cap", "0.001"]) in (0, 1)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tuner.cli", "dashboard", str(path), "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    assert server.stdout is not None
    said = next((line for line in iter(server.stdout.readline, "") if "?token=" in line or "error" in line), "")
    if "?token=" not in said:
        server.kill()
        pytest.fail(f"the dashboard did not start: {said}")
    TOKENS[url] = said.split("?token=")[1].split()[0]
    deadline = time.monotonic() + PATIENCE
    while True:
        try:
            opened(f"{url}/api/studies", timeout=2)
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
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (test extra)")
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


def opened(url: str, *, timeout: float = 10) -> bytes:
    """The body of a dashboard's ``url``, asked with its run's token."""
    token = next(token for base, token in TOKENS.items() if url.startswith(base))
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    return bytes(urllib.request.urlopen(request, timeout=timeout).read())


def page_text(driver: object, url: str, expected: str, timeout: float = PATIENCE) -> str:
    """Open ``url`` (with the run's token, which the dashboard turns into a cookie) and wait until the rendered page
    shows ``expected``; returns the page's text."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    token = next(token for base, token in TOKENS.items() if url.startswith(base))
    driver.get(f"{url}{'&' if '?' in url else '?'}token={token}")  # type: ignore[attr-defined]
    WebDriverWait(driver, timeout).until(lambda d: expected in d.find_element(By.TAG_NAME, "body").text)
    return driver.find_element(By.TAG_NAME, "body").text  # type: ignore[attr-defined]


@needs_browser
def test_the_study_page_shows_the_grid_and_trade_off(dashboard: tuple[str, Path], browser: object) -> None:
    url, path = dashboard
    text = page_text(browser, f"{url}/dashboard/studies/1", "search over (c, fine-tuning epochs)")
    assert "dash" in text and "privacy–utility trade-off" in text and "trials: feasibility" in text
    assert "caveats" in text and "The measured epsilon is an estimate" in text
    assert "privacy owner-side: these pages show each trial's exact epsilon and F1, measured on the private data; " \
           "never publish them" in text  # the study page says first what its figures are
    browser.execute_script(  # type: ignore[attr-defined]
        "[...document.querySelectorAll('.js-plotly-plot')]"
        ".find(e => e.textContent.includes('search over')).scrollIntoView()")
    SCREENSHOTS.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOTS / "dashboard-study.png"))  # type: ignore[attr-defined]
    browser.execute_script(  # type: ignore[attr-defined]
        "[...document.querySelectorAll('.js-plotly-plot')]"
        ".find(e => e.textContent.includes('trials: feasibility')).scrollIntoView()")
    assert browser.save_screenshot(str(SCREENSHOTS / "dashboard-feasibility.png"))  # type: ignore[attr-defined]


@needs_browser
def test_a_trial_page_shows_its_note_constraints_and_figures(dashboard: tuple[str, Path], browser: object) -> None:
    url, path = dashboard
    study = open_study(StudyConfig.from_toml(path), create=False)
    trial = best_feasible(study) or study.trials[0]
    text = page_text(browser, f"{url}/dashboard/studies/1/trials?numbers={trial.number}",
                     "Next (the guide's flowchart)")
    assert f"Trial {trial.number}: {trial.user_attrs['diagnosis'].replace('_', ' ')}" in text
    assert trial.user_attrs["recommendation"] in text
    for key in ("feasible", "violation", "epsilon", "f1_macro_median", "violated"):  # its named columns
        assert key in text
    assert "constraint_epsilon" not in text and "max_delta_series" not in text  # not every stored aggregate
    assert "Owner-side: these pages show each trial's exact epsilon and F1" in text
    assert f"feasible: {'yes' if is_feasible(trial) else 'no'} — violated:" in text
    assert "ε / target − 1: above 0, ε exceeds the target" in text  # the constraints, named and explained
    from selenium.webdriver.support.ui import WebDriverWait

    find = f"[...document.querySelectorAll('img')].find(e => e.alt === '{PICTURE_ALT.format(number=trial.number)}')"
    script = f"const i = {find}; return i && i.complete ? [i.naturalWidth, i.naturalHeight, i.width] : null"
    width, height, shown = WebDriverWait(browser, 60).until(lambda d: d.execute_script(script))
    assert (width, height) == (960, 360) and shown > 500  # the picture loaded and is drawn in the note, full size
    browser.execute_script(f"{find}.scrollIntoView()")  # type: ignore[attr-defined]
    SCREENSHOTS.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOTS / "dashboard-trial.png"))  # type: ignore[attr-defined]


@needs_browser
@pytest.mark.parametrize("name, feasible", [("dash", "yes"), ("dash-strict", "no")])
def test_the_trial_table_has_few_named_columns_and_sorts_by_violation(dashboard: tuple[str, Path], browser: object,
                                                                      name: str, feasible: str) -> None:
    """optuna-dashboard's trial table (its Smart Selection page) shows user attributes as columns: the few named
    ones the dashboard serves, rows one line tall; ``violation`` sorts (a number), and the switch "Include
    Infeasible trials" reads the constraints the trials store."""
    url, _ = dashboard
    study_id = api_study(url, name)["study_id"]
    text = page_text(browser, f"{url}/dashboard/studies/{study_id}/smartSelection", "UserAttribute feasible",
                     timeout=120)
    assert "Include Infeasible trials" in text
    table = ("const table = [...document.querySelectorAll('table')].find(t => t.textContent.includes('UserAttribute "
             "feasible'));")
    headers = browser.execute_script(  # type: ignore[attr-defined]
        table + "return [...table.querySelectorAll('thead th')].map(h => [h.textContent.trim(), "
        "!!h.querySelector('.MuiTableSortLabel-root')])")
    sortable = {re.sub(r"sorted (ascending|descending)$", "", label): sorts for label, sorts in headers}
    shown = [label.removeprefix("UserAttribute ") for label in sortable if label.startswith("UserAttribute ")]
    assert shown == ["feasible", "violation", "epsilon", "f1_macro_median", "f1_weighted_median", "diagnosis",
                     "violated"]
    assert len(headers) <= 14 and sortable["UserAttribute violation"]  # a sort control on violation
    column = browser.execute_script(  # type: ignore[attr-defined]
        table + "const at = [...table.querySelectorAll('thead th')].findIndex(h => h.textContent.includes("
        "'UserAttribute feasible'));"
        "return [...table.querySelectorAll('tbody tr')].map(r => [r.querySelectorAll('td')[at].textContent, "
        "r.getBoundingClientRect().height])")
    assert [value for value, _ in column] == [feasible, feasible]
    assert max(height for _, height in column) < 120  # rows about one line tall, not hundreds of pixels
    violations = browser.execute_script(  # type: ignore[attr-defined]
        table + "const at = [...table.querySelectorAll('thead th')].findIndex(h => h.textContent.includes("
        "'UserAttribute violation'));"
        "table.querySelectorAll('thead th')[at].querySelector('.MuiTableSortLabel-root').click();"
        "return [...table.querySelectorAll('tbody tr')].map(r => Number(r.querySelectorAll('td')[at].textContent))")
    assert violations in (sorted(violations), sorted(violations, reverse=True))
    SCREENSHOTS.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOTS / f"dashboard-selection-{name}.png"))  # type: ignore[attr-defined]


def api_study(url: str, name: str) -> dict[str, object]:
    """The dashboard's JSON for the study ``name`` (what its History and Best widgets draw)."""
    studies = json.loads(opened(f"{url}/api/studies"))["study_summaries"]
    (study_id,) = [s["study_id"] for s in studies if s["study_name"] == name]
    study: dict[str, object] = json.loads(opened(f"{url}/api/studies/{study_id}?after=0"))
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


@needs_browser
@pytest.mark.parametrize("name", ["dash", "dash-strict"])
def test_the_history_plot_marks_infeasible_trials(dashboard: tuple[str, Path], browser: object, name: str) -> None:
    url, path = dashboard
    config = StudyConfig.from_toml(path)
    study = optuna.load_study(study_name=name, storage=config.storage_url)  # the rejudged one ranks at its own cap
    trials = study.get_trials(deepcopy=False)
    infeasible = [t for t in trials if t.values is not None and not is_feasible(t)]
    if name == "dash-strict":
        assert len(infeasible) == len(trials) == 2  # rejudged at epsilon 0.001, none is feasible
    served = api_study(url, name)
    for trial, shown in zip(trials, served["trials"], strict=True):  # type: ignore[call-overload]
        assert shown["constraints"] == list(named_constraints(trial).values())
    points = history_points(browser, url, served["study_id"])
    assert points.get(f"Infeasible Trial of {name}", 0) == len(infeasible)
