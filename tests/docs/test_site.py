"""The documentation site builds strictly, and its API reference documents every public name.

``mkdocs build --strict`` (mkdocs.yml at the root) fails on a broken link or anchor, a page
missing from the navigation, a reference that cannot be resolved or a docstring that does not
parse. The reference must then hold every name of every public module's ``__all__`` (a module
whose dotted path has no ``_`` part), each with its docstring.
"""

from __future__ import annotations

import html
import importlib
import importlib.util
import inspect
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

import daimon

from .markdown import ROOT

MKDOCS = Path(sys.executable).with_name("mkdocs")
BUILD_SECONDS = 60.0


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


def _public_modules() -> list[str]:
    names = []
    for root in map(Path, daimon.__path__):
        for path in root.rglob("*.py"):
            parts = ("daimon", *path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if not any(part.startswith("_") for part in parts):
                names.append(".".join(parts))
    return sorted(names)


def _exports(name: str) -> tuple[ModuleType, tuple[str, ...]] | None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    return None if exported is None else (module, exported)


def _griffe_rest() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_griffe_rest", ROOT / "docs" / "_griffe_rest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


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
                sections[found.group(1)] = text[found.start() : found.start() + 6000]
        return cls(sections)


def _where_documented(reference: Reference, modules: dict[str, ModuleType], name: str, obj: object) -> str | None:
    """The id of a section documenting ``obj`` under ``name``, in any module that exports it."""
    for module_name, module in modules.items():
        ident = f"{module_name}.{name}"
        if ident in reference.sections and getattr(module, name, None) is obj:
            return ident
    return None


def _summary(obj: object, rest: ModuleType) -> str | None:
    """The first words of an object's own docstring, as the reference renders them."""
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        return None
    doc = inspect.getdoc(obj)
    if not doc:
        return ""
    line = rest._markdown(doc.strip().split("\n\n")[0]).replace("`", "").replace("*", "")
    return " ".join(line.split()[:4])


def test_every_public_name_is_in_the_reference_with_its_docstring(site: Site) -> None:
    reference = Reference.read(site.root)
    rest = _griffe_rest()
    modules: dict[str, ModuleType] = {}
    exports: dict[str, tuple[str, ...]] = {}
    for module_name in _public_modules():
        found = _exports(module_name)
        if found:
            modules[module_name], exports[module_name] = found
    assert len(exports) > 60
    missing, undocumented = [], []
    for module_name, names in exports.items():
        for name in names:
            obj = getattr(modules[module_name], name)
            ident = _where_documented(reference, modules, name, obj)
            if ident is None:
                missing.append(f"{module_name}.{name}")
                continue
            summary = _summary(obj, rest)
            if summary == "":
                undocumented.append(f"{module_name}.{name} (no docstring)")
            elif summary and summary not in _text(reference.sections[ident]):
                undocumented.append(f"{ident}: {summary!r} not rendered")
    assert not missing, f"not in the API reference: {missing}"
    assert not undocumented, "\n".join(undocumented)


def test_every_page_is_in_the_navigation() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    listed = set(re.findall(r":\s*([\w/.-]+\.md)\s*$", config, re.M))
    assert pages == listed, f"not in nav: {sorted(pages - listed)}; missing: {sorted(listed - pages)}"
