"""The documentation site builds strictly, and its API reference documents every public name.

``mkdocs build --strict`` (mkdocs.yml at the root) fails on a broken link or anchor, a page
missing from the navigation, a reference that cannot be resolved or a docstring that does not
parse. The reference must then hold every name of every public module's ``__all__`` (a module
whose dotted path has no ``_`` part), each with its docstring.
"""

from __future__ import annotations

import functools
import html
import http.server
import importlib.util
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import griffe
import pytest

from .markdown import ROOT

MKDOCS = Path(sys.executable).with_name("mkdocs")
BUILD_SECONDS = 180.0
"""A generous bound on the build's wall time: about 15 s of CPU, stretched by a loaded machine."""
CHROMIUM = "/usr/bin/chromium"
"""Debian's Chromium, driven by playwright (as in tests/server/ui: browser downloads fail)."""
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
COLUMN_VIEWPORT = {"width": 1280, "height": 900}
"""A laptop's width, at which the page shows both sidebars beside the text column."""
SECTION_CHARS = 40_000
"""How much HTML after an object's heading holds its docstring (a signature can be long)."""


pytestmark = pytest.mark.timeout(BUILD_SECONDS * 3)


@dataclass(frozen=True)
class Site:
    """A built site and what the build said."""

    root: Path
    log: str


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=BUILD_SECONDS * 3,
        env={"PATH": str(MKDOCS.parent), "NO_MKDOCS_2_WARNING": "1", "HOME": str(out)},
        check=False,
    )
    log = built.stdout + built.stderr
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{log[-6000:]}"
    return Site(out, log)


def test_the_site_builds_strictly_without_warnings(site: Site) -> None:
    warnings = [line for line in site.log.splitlines() if re.match(r"\s*(WARNING|ERROR)", line)]
    assert not warnings, "\n".join(warnings)
    assert (site.root / "index.html").is_file()
    assert (site.root / "search" / "search_index.json").is_file(), "search is not built"


def test_the_build_is_fast_enough(site: Site) -> None:
    took = re.search(r"Documentation built in ([\d.]+) seconds", site.log)
    assert took, site.log[-2000:]
    assert float(took.group(1)) < BUILD_SECONDS


def test_the_changelog_page_includes_changelog_md(site: Site) -> None:
    page = (site.root / "changelog" / "index.html").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), re.M)
    assert headings
    for heading in headings:
        assert html.escape(heading, quote=False) in page, heading


@dataclass(frozen=True)
class Reference:
    """The rendered API reference: each documented object's id, with the text of its section."""

    sections: dict[str, str]

    @classmethod
    def read(cls, root: Path) -> Reference:
        sections: dict[str, str] = {}
        for page in (root / "reference").rglob("*.html"):
            text = page.read_text(encoding="utf-8")
            for found in re.finditer(r'<h[2-6] id="(daimon[\w.]*)"', text):
                sections[found.group(1)] = text[found.start() : found.start() + SECTION_CHARS]
        return cls(sections)


def _public_modules() -> dict[str, griffe.Module]:
    """Every module of the package whose dotted path has no ``_`` part, read from the source."""
    package = griffe.load(
        "daimon", search_paths=[str(ROOT / "src")], resolve_aliases=True, resolve_external=False
    )
    found: dict[str, griffe.Module] = {}

    def walk(module: griffe.Module) -> None:
        found[module.path] = module
        for name, sub in module.modules.items():
            if not name.startswith("_") and not sub.is_alias:
                walk(sub)

    walk(package)
    return found


def _target(module: griffe.Module, name: str) -> griffe.Object:
    member = module[name]
    return member.final_target if member.is_alias else member  # type: ignore[no-any-return]


def _griffe_rest() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_griffe_rest", ROOT / "docs" / "_griffe_rest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _words(fragment: str) -> str:
    """The letters and digits of an HTML fragment or a text (tags, spaces, punctuation out)."""
    return re.sub(r"\W", "", html.unescape(re.sub(r"<[^>]+>", "", fragment)))


def _summary(target: griffe.Object, rest: ModuleType) -> str | None:
    """The first words of a class's or function's docstring, as the reference renders them."""
    if target.kind not in (griffe.Kind.CLASS, griffe.Kind.FUNCTION):
        return None
    if target.docstring is None or not target.docstring.value.strip():
        return ""
    first = target.docstring.value.strip().split("\n\n")[0]
    line = rest._markdown(first).replace("`", "").replace("*", "")
    return " ".join(line.split()[:4])


def test_every_public_name_is_in_the_reference_with_its_docstring(site: Site) -> None:
    reference = Reference.read(site.root)
    rest = _griffe_rest()
    modules = {path: m for path, m in _public_modules().items() if m.exports is not None}
    assert len(modules) > 60
    documented: dict[str, str] = {}
    """The canonical path of each object the reference documents -> the id of its section."""
    for path, module in modules.items():
        for name in module.exports or ():
            ident = f"{path}.{name}"
            if ident in reference.sections:
                documented.setdefault(_target(module, name).path, ident)
    missing, undocumented = [], []
    for path, module in modules.items():
        for name in module.exports or ():
            target = _target(module, name)
            ident = f"{path}.{name}"
            ident = ident if ident in reference.sections else documented.get(target.path, "")
            if not ident:
                missing.append(f"{path}.{name}")
                continue
            summary = _summary(target, rest)
            if summary == "":
                undocumented.append(f"{path}.{name} (no docstring)")
            elif summary and _words(summary) not in _words(reference.sections[ident]):
                undocumented.append(f"{ident}: {summary!r} not rendered")
    assert not missing, f"not in the API reference: {missing}"
    assert not undocumented, "\n".join(undocumented)


def test_every_page_is_in_the_navigation() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    listed = set(re.findall(r":\s*([\w/.-]+\.md)\s*$", config, re.M))
    assert pages == listed, (
        f"not in nav: {sorted(pages - listed)}; missing: {sorted(listed - pages)}"
    )


def _pages_with_results() -> list[str]:
    """The site paths of the pages whose examples print ``# -> result`` at the end of a line."""
    pages = sorted((ROOT / "docs").rglob("*.md"))
    return [
        "" if page.name == "index.md" else f"{page.relative_to(ROOT / 'docs').with_suffix('')}/"
        for page in pages
        if "# ->" in page.read_text(encoding="utf-8")
    ]


@contextmanager
def _served(root: Path) -> Iterator[str]:
    """The built site over HTTP on loopback (its search and scripts need http, not file)."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """Keep the test's output to its findings."""


_CODE_BLOCKS = """() => [...document.querySelectorAll(
        ".md-typeset .highlight:not(.language-text) pre > code")]
    .map((code) => ({
        overflows: code.scrollWidth > code.clientWidth + 1,
        longest: code.textContent.split("\\n").sort((a, b) => b.length - a.length)[0],
    }))"""
"""Each code block of the page: whether it is wider than its column, and its longest line."""


def test_no_code_block_overflows_its_column_at_1280_px(site: Site) -> None:
    """Code (every block with a language) fits the text column; plain drawings may scroll."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium", pytrace=False)
    from playwright.sync_api import sync_playwright

    pages = _pages_with_results()
    assert len(pages) > 20, pages
    overflowing: list[str] = []
    checked = 0
    with _served(site.root) as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=COLUMN_VIEWPORT)
        for path in pages:
            page.goto(base + path)
            blocks = page.evaluate(_CODE_BLOCKS)
            checked += len(blocks)
            overflowing += [
                f"{path or 'index'}: {block['longest'].strip()[:100]}"
                for block in blocks
                if block["overflows"]
            ]
        browser.close()
    assert checked > len(pages), f"only {checked} code blocks found on {len(pages)} pages"
    assert not overflowing, "code blocks wider than the column:\n" + "\n".join(overflowing)
