"""The pages in a real headless Chromium (Debian's chromium and chromium-driver, selenium), one
browser session for every test: each page loads with no console error and fits a 390 px phone;
the disc of sp-clean's day shows the scenario's peak speed and its driver changes; the jornada of
D-1001, who drove FRT1A01 and then FRT1A02, shows both buses. Screenshots at 390 and 1280 px are
saved under tmp/artifacts/pages (printed)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.pages.conftest import Server
from tests.pages.fleet import BROKEN_TRIP, CLEAN_TRIP, DAY
from tests.services import require

ARTIFACTS = Path(os.environ.get("FROTA_ARTIFACTS", Path(__file__).resolve().parents[2] / "tmp" / "artifacts")) / "pages"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
WIDTHS = (390, 1280)

try:  # a dev extra (scripts/bootstrap.sh installs it); without it the tests say so below
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.chrome.webdriver import WebDriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    HAVE_SELENIUM = True
except ImportError:  # pragma: no cover
    HAVE_SELENIUM = False


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    """One headless Chromium for every page test."""
    require(HAVE_SELENIUM, "selenium is not installed (pip install -e '.[dev]')")
    require(Path(CHROMIUM).exists() and (Path(CHROMEDRIVER).exists() or bool(shutil.which("chromedriver"))),
            "chromium and chromium-driver are not installed (scripts/bootstrap.sh installs them)")
    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--lang=pt-BR", "--window-size=1280,900"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = WebDriver(service=Service(CHROMEDRIVER), options=options)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots of the pages: {ARTIFACTS}")
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def logged_in(browser: WebDriver, server: Server) -> WebDriver:
    """The browser, logged in as a fiscal through the login form."""
    browser.get(server.base + "/")
    assert "/entrar" in browser.current_url
    browser.find_element(By.ID, "token").send_keys(server.token("fiscal"))
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    # the click returns before the next page loads: wait for it (a condition, not a delay)
    WebDriverWait(browser, 60).until(lambda b: "/entrar" not in b.current_url)
    assert browser.find_element(By.TAG_NAME, "h1").text == "Frota"
    console(browser)                 # drop what the login page logged (checked by page_ok)
    return browser


def console(browser: WebDriver) -> list[dict[str, Any]]:
    """The browser's console entries since the last call."""
    entries: list[dict[str, Any]] = browser.get_log("browser")  # type: ignore[no-untyped-call]
    return entries


def page_ok(browser: WebDriver, server: Server, path: str, name: str) -> str:
    """Load a page at 1280 and at 390 px: no console error, nothing wider than the phone;
    save both screenshots; return the page's text."""
    text = ""
    for width in WIDTHS:
        browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600})
        browser.get(server.base + path)
        errors = [e for e in console(browser) if e["level"] == "SEVERE"]
        assert errors == [], (path, errors)
        wide = browser.execute_script("return document.documentElement.scrollWidth")
        assert wide <= width, f"{path} is {wide} px wide at {width} px"
        height = min(6000, int(browser.execute_script("return document.documentElement.scrollHeight")))
        browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})
        browser.save_screenshot(str(ARTIFACTS / f"{name}-{width}.png"))
        text = browser.find_element(By.TAG_NAME, "body").text
    return text


def test_frota(logged_in: WebDriver, server: Server) -> None:
    text = page_ok(logged_in, server, "/", "frota")
    for vehicle in ("FRT1A01", "FRT1A02", "FRT2B02"):
        assert vehicle in text


def test_disco_do_dia_of_sp_clean(logged_in: WebDriver, server: Server) -> None:
    text = page_ok(logged_in, server, f"/disco/FRT1A01?dia={DAY}", "disco")
    peak = logged_in.find_element(By.CSS_SELECTOR, ".velocidade-maxima").text
    kmh = float(re.fullmatch(r"(\d+,\d) km/h", peak).group(1).replace(",", "."))  # type: ignore[union-attr]
    assert 86 - 1.5 <= kmh <= 86 + 1.5      # 86 km/h cruise ± 1.5 km/h jitter (sp-clean.toml)
    # the driver puts the card in at 08:30 local (11:30Z) and takes it out at the end: 2 changes
    assert logged_in.find_element(By.CSS_SELECTOR, ".trocas").text == "2"
    assert len(logged_in.find_elements(By.CSS_SELECTOR, "svg.disco line.troca")) == 2
    assert re.search(r"08:30\s+C1 condutor 1: D-1001 \(Maria Souza\)", text)
    assert "C2 condutor 1: sem condutor" in text
    rings = logged_in.find_elements(By.CSS_SELECTOR, "svg.disco circle.anel")
    assert len(rings) == 8                  # 0, 20, ..., 140 km/h
    assert logged_in.find_elements(By.CSS_SELECTOR, "svg.disco path.em-movimento")
    assert "Disco do dia — FRT1A01, 02/03/2026" in text
    # printable: the print CSS leaves out the navigation and the forms, keeps the disc
    logged_in.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    try:
        assert not logged_in.find_element(By.TAG_NAME, "header").is_displayed()
        assert not any(f.is_displayed() for f in logged_in.find_elements(By.TAG_NAME, "form"))
        assert logged_in.find_element(By.CSS_SELECTOR, "svg.disco").is_displayed()
    finally:
        logged_in.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})


def test_jornada_of_a_driver_who_changed_buses(logged_in: WebDriver, server: Server) -> None:
    text = page_ok(logged_in, server, f"/jornada/D-1001?dia={DAY}", "jornada")
    vehicles = [a.text for a in logged_in.find_elements(By.CSS_SELECTOR, "a.veiculo")]
    assert vehicles == ["FRT1A01", "FRT1A02"]
    assert "Maria Souza" in text
    assert len(logged_in.find_elements(By.CSS_SELECTOR, "svg.jornada rect.veiculo")) >= 2


def test_viagem(logged_in: WebDriver, server: Server) -> None:
    text = page_ok(logged_in, server, f"/viagem/FRT1A01/{CLEAN_TRIP}", "viagem")
    assert "Terminal Rodoviário de Jundiaí" in text
    assert logged_in.find_element(By.CSS_SELECTOR, ".maximo-a-bordo").text == "44"
    broken = page_ok(logged_in, server, f"/viagem/FRT2B02/{BROKEN_TRIP}", "viagem-interrompida")
    assert "interrupção da viagem" in broken
    assert "Decreto SP 29.913/1989 art. 39" in broken


def test_ocorrencias_and_estatisticas(logged_in: WebDriver, server: Server) -> None:
    text = page_ok(logged_in, server, "/ocorrencias", "ocorrencias")
    assert "assistência aos passageiros" in text
    assert "infração" in text
    stats = page_ok(logged_in, server, "/estatisticas", "estatisticas")
    assert "SP-1001" in stats
    assert "Baixar CSV" in stats
