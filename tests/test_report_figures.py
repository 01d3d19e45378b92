"""The `ci` study's report, checked by looking: every figure passes
:func:`fitting.test_utils.check_figure`, and report.html shows every image in headless Chromium.

Both read the study that tests/conftest.py's `ci_study` runs once per session.
"""

import json
import os
import sys
from pathlib import Path

import pytest

from fitting import plots
from fitting.test_utils import check_figure
from mnmt.study.runner import StudyData
from mnmt.study.spec import PRESETS
from mnmt.study.stages import export_and_report

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"  # Debian packages `chromium` and `chromium-driver`
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                  "--force-device-scale-factor=1")
#: the page's viewport, and so the screenshot's size in pixels
WINDOW = (1280, 1024)


def test_every_figure_of_the_ci_report_passes_the_figure_checks(ci_study, tmp_path, monkeypatch):
    """The report is written again in this process from the study's run directories, through
    the study's own export-and-report stage, with `fitting.plots.save` checking each figure
    before it saves it (the study itself ran in a child process)."""
    out, _ = ci_study
    checked: dict[str, list[str]] = {}
    save = plots.save

    def checking_save(fig, path, **kwargs):
        name = os.path.basename(path)
        checked[name] = check_figure(fig, name)
        return save(fig, path, **kwargs)

    monkeypatch.setattr(plots, "save", checking_save)
    spec = PRESETS["ci"]
    data = StudyData(vocabulary_path=str(out / "data" / "spm.model"), tasks={},
                     irreducible_loss=json.loads((out / "data" / "irreducible_loss.json").read_text()))
    report = export_and_report(spec, sorted((out / "runs").iterdir()), data, tmp_path,
                               log=lambda message: None)
    # every figure of the study's report, and no figure lost to an exception (the report
    # writes those under "Skipped" and goes on)
    assert sorted(checked) == sorted(p.name for p in (out / "report" / "figures").glob("*.png"))
    assert checked, "the ci report has no figures"
    assert not [k for k in report.skipped if k.startswith("figures")], report.skipped
    problems = [p for found in checked.values() for p in found]
    assert not problems, "\n".join(problems)


def _chromium_or_skip() -> None:
    """Skip without Chromium, chromedriver or Selenium; fail instead where CI is set, so that CI
    never skips this test silently."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (the dev extra)")
    if not missing:
        return
    reason = (f"headless browser test: {', '.join(missing)} missing "
              "(apt-get install chromium chromium-driver; pip install -e '.[dev]')")
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(reason + "; CI is set, so the test may not be skipped")
    pytest.skip(reason)


def _pixels(path: Path):
    from PIL import Image

    with Image.open(path) as image:
        return image.convert("RGB")


def test_report_html_shows_every_image_in_headless_chromium(ci_study, tmp_path, monkeypatch,
                                                            record_property):
    _chromium_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    out, _ = ci_study
    html = out / "report" / "report.html"
    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager may never download a driver
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                 f"--window-size={WINDOW[0]},{WINDOW[1] + 200}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        # the viewport exactly WINDOW (headless Chromium's window keeps room for a toolbar)
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": WINDOW[0], "height": WINDOW[1], "deviceScaleFactor": 1,
                                "mobile": False})
        driver.get(html.as_uri())  # returns once the page and its images have loaded
        assert driver.title == "Study cpu-ci"
        # the first figure scrolled to the top of the viewport: the report's text and tables
        # before it (the extrapolation section leads) may be longer than one screen
        driver.execute_script("document.images[0].scrollIntoView({block: 'start'})")
        images = driver.execute_script(
            "return Array.from(document.images).map(i => ({src: i.getAttribute('src'), "
            "complete: i.complete, width: i.naturalWidth, height: i.naturalHeight, "
            "rect: i.getBoundingClientRect().toJSON()}))")
        shot = tmp_path / "report.png"
        assert driver.save_screenshot(str(shot))
    finally:
        driver.quit()
    print(f"screenshot of {html}: {shot}")
    record_property("screenshot", str(shot))

    figures = sorted(p.name for p in (out / "report" / "figures").glob("*.png"))
    assert figures and sorted(os.path.basename(i["src"]) for i in images) == figures
    for image in images:  # loaded, at the size of the file it names
        assert image["complete"] and image["width"] > 0, image
        png = _pixels(html.parent / image["src"])
        assert (image["width"], image["height"]) == png.size, image

    screenshot = _pixels(shot)
    assert screenshot.size == WINDOW
    assert len(screenshot.getcolors(maxcolors=1 << 24)) > 64, "the screenshot is (nearly) blank"
    # the first figure, scrolled into view, sits in the screenshot and is drawn there: its box
    # holds the plot's many colours, not the page's background
    rect = images[0]["rect"]
    assert rect["bottom"] <= WINDOW[1], f"first figure below the screenshot: {rect}"
    box = screenshot.crop((int(rect["left"]), int(rect["top"]), int(rect["right"]),
                           int(rect["bottom"])))
    assert len(box.getcolors(maxcolors=1 << 24)) > 32, "the first figure is blank on the page"


@pytest.mark.parametrize("ci", ["", "true"])
@pytest.mark.parametrize("absent", [("CHROMIUM",), ("CHROMEDRIVER",), ("CHROMIUM", "CHROMEDRIVER")])
def test_without_chromium_the_browser_test_skips_except_under_ci(absent, ci, monkeypatch):
    """Whatever this machine has installed: each absent program is named in the reason, a
    present one is not; the test skips on a developer's machine and fails where CI is set."""
    module = sys.modules[__name__]
    for name in ("CHROMIUM", "CHROMEDRIVER"):  # present: an executable that surely exists
        monkeypatch.setattr(module, name, f"/nonexistent/{name.lower()}" if name in absent
                            else sys.executable)
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception if ci else pytest.skip.Exception) as stopped:
        _chromium_or_skip()
    reason = str(stopped.value)
    for name in ("CHROMIUM", "CHROMEDRIVER"):
        assert (f"/nonexistent/{name.lower()}" in reason) == (name in absent), reason
    assert reason.endswith("may not be skipped") == bool(ci), reason
