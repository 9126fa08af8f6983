"""The front end's files themselves: what they may never do with data, and that everything
index.html and the modules refer to ships in the package (no build step, no bundle)."""
from __future__ import annotations

import re
from pathlib import Path

import nsqmp.admin

STATIC = Path(nsqmp.admin.__file__).parent / "static"
SCRIPTS = sorted(STATIC.rglob("*.js"))

# Ways to turn a string into markup or code; the UI inserts data as text only.
FORBIDDEN = [r"\.innerHTML\s*=(?!=)", r"\.outerHTML\s*=(?!=)", r"insertAdjacentHTML", r"document\.write",
             r"\beval\(", r"new Function\(", r"setTimeout\(\s*['\"`]"]


def test_no_script_turns_strings_into_markup_or_code():
    offences = [f"{path.relative_to(STATIC)}:{n}: {line.strip()}"
                for path in SCRIPTS for n, line in enumerate(path.read_text().splitlines(), 1)
                if any(re.search(p, line) for p in FORBIDDEN)]
    assert offences == []


def test_every_import_and_asset_exists_and_every_module_is_used():
    html = (STATIC / "index.html").read_text()
    assets = re.findall(r'(?:src|href)="__NSQMP_BASE_PATH__/static/([^"]+)"', html)
    assert "style.css" in assets and "js/app.js" in assets
    for asset in assets:
        assert (STATIC / asset).is_file(), asset
    imported = {STATIC / "js" / "app.js"}
    for path in SCRIPTS:
        for target in re.findall(r"""from\s+'(\.[^']+)'""", path.read_text()):
            resolved = (path.parent / target).resolve()
            assert resolved.is_file(), f"{path.relative_to(STATIC)} imports missing {target}"
            imported.add(resolved)
    assert {p.resolve() for p in SCRIPTS} == {p.resolve() for p in imported}, "a module nothing imports"
    preloaded = set(re.findall(r'rel="modulepreload" href="__NSQMP_BASE_PATH__/static/([^"]+)"', html))
    assert preloaded | {"js/app.js"} == {str(p.relative_to(STATIC)) for p in SCRIPTS}, "index.html preloads them all"


def test_no_file_is_minified_or_large():
    for path in STATIC.rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert len(text) < 20_000, f"{path.name} is {len(text)} bytes: split it"
            assert max(len(line) for line in text.splitlines()) <= 120, f"{path.name} has a line over 120"
