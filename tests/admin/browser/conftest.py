"""Fixtures of the admin's browser tests: one cluster and one headless Chromium per module
(Debian's chromium and chromedriver; nothing downloads a browser)."""
from __future__ import annotations

import shutil

import pytest

from tests.admin.browser.cluster import start_cluster
from tests.admin.browser.godaemons import have_go_nsq

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture(scope="module", params=["nsqmp", pytest.param("nsqd", marks=pytest.mark.skipif(
    not have_go_nsq(), reason="nsqd/nsqlookupd 1.3.0 not found ($NSQ_BIN or PATH)"))])
def cluster(request, tmp_path_factory):
    """The cluster of cluster.start_cluster, on nsqmp and (where the Go binaries are) on NSQ's
    nsqd and nsqlookupd; the admin samples and the pages poll every second, and a broker that
    has not answered in 1 s counts as failed."""
    c = start_cluster(tmp_path_factory.mktemp(f"admin-cluster-{request.param}"), "--history-interval", "1",
                      "--refresh-interval", "1", "--http-client-request-timeout", "1", nsq=request.param)
    yield c
    failures = c.stop()
    assert not failures, failures


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """A headless Chromium driven by selenium, one per module."""
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.fail("the browser tests need Debian's chromium and chromium-driver (make test installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--no-first-run", "--window-size=1400,1000",
                f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    # a script error anywhere in the module's pages fails it (network errors are the tests' own)
    errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE" and "Uncaught" in e["message"]]
    driver.quit()
    assert not errors, errors
