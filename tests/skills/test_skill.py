"""Reading one SKILL.md: the Agent Skills specification's rules, a clear error for each break."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from daimon import BuilderError, DaimonError, MissingDependencyError, Skill, SkillError

WriteSkill = Callable[..., Path]


def write_raw(tmp_path: Path, folder: str, text: str) -> Path:
    """A skill folder whose SKILL.md is exactly ``text``."""
    root = tmp_path / folder
    root.mkdir(parents=True, exist_ok=True)
    (root / "SKILL.md").write_text(text, encoding="utf-8")
    return root


def test_every_field_of_the_specification_is_read(write_skill: WriteSkill) -> None:
    folder = write_skill(
        "pdf-processing",
        ">\n  Extracts text from PDF files.\n  Use when the user mentions PDFs.",
        "\n# PDF\n\nRead references/guide.md.\n\n",
        extra=(
            "license: Apache-2.0\n"
            "compatibility: Requires poppler\n"
            "metadata:\n  author: example-org\n  version: 1.0\n  released: 2025-01-31\n"
            "allowed-tools: Bash(pdftotext:*) Read\n"
            "argument-hint: '[file]'\n"
        ),
        files={"references/guide.md": "guide", "scripts/extract.py": "print()"},
    )
    skill = Skill.from_dir(folder)
    assert skill.name == "pdf-processing"
    assert skill.description == "Extracts text from PDF files. Use when the user mentions PDFs."
    assert skill.instructions == "# PDF\n\nRead references/guide.md."
    assert skill.path == folder.resolve()
    assert skill.files == ("references/guide.md", "scripts/extract.py")
    assert skill.license == "Apache-2.0"
    assert skill.compatibility == "Requires poppler"
    # YAML reads 1.0 as a float and the date as a date: the spec says strings, so text they become
    assert dict(skill.metadata) == {
        "author": "example-org",
        "version": "1.0",
        "released": "2025-01-31",
    }
    assert skill.allowed_tools == ("Bash(pdftotext:*)", "Read")
    assert dict(skill.extra) == {"argument-hint": "[file]"}  # a client's own field: kept


def test_the_minimal_skill_has_defaults(tmp_path: Path) -> None:
    skill = Skill.from_dir(write_raw(tmp_path, "tiny", "---\nname: tiny\ndescription: D.\n---\n"))
    assert (skill.instructions, skill.files, skill.license, skill.compatibility) == (
        "",
        (),
        None,
        None,
    )
    assert (dict(skill.metadata), skill.allowed_tools, dict(skill.extra)) == ({}, (), {})


def test_allowed_tools_may_be_a_list(write_skill: WriteSkill) -> None:
    folder = write_skill("lister", extra="allowed-tools:\n  - Read\n  - Bash(git:*)\n")
    assert Skill.from_dir(folder).allowed_tools == ("Read", "Bash(git:*)")


def test_hidden_files_and_folders_are_not_listed(write_skill: WriteSkill) -> None:
    folder = write_skill(
        "quiet", files={".env": "SECRET=1", ".git/config": "x", "a/.cache": "x", "a/b.md": "b"}
    )
    assert Skill.from_dir(folder).files == ("a/b.md",)


def test_a_byte_order_mark_and_windows_line_ends_are_read(tmp_path: Path) -> None:
    text = "\ufeff---\r\nname: crlf\r\ndescription: Windows made it.\r\n---\r\nBody.\r\n"
    skill = Skill.from_dir(write_raw(tmp_path, "crlf", text))
    assert (skill.name, skill.description, skill.instructions) == (
        "crlf",
        "Windows made it.",
        "Body.",
    )


def test_a_unicode_lowercase_name_is_allowed(tmp_path: Path) -> None:
    text = "---\nname: résumé-writer\ndescription: Writes CVs.\n---\n"
    assert Skill.from_dir(write_raw(tmp_path, "résumé-writer", text)).name == "résumé-writer"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("---\ndescription: D.\n---\nBody", "the front matter has no 'name'"),
        ("---\nname: broken\n---\nBody", "the front matter has no 'description'"),
        ("# Just Markdown\n", "must start with YAML front matter"),
        ("---\nname: broken\ndescription: D.\n", "the front matter is never closed"),
        ("---\nname: broken\ndescription: [unclosed\n---\n", "the front matter is not valid YAML"),
        ("---\n- name\n- description\n---\n", "must be a mapping of fields, not a list"),
        ("---\n---\nBody", "must be a mapping of fields, not empty"),
        ("---\nname: 7\ndescription: D.\n---\n", "'name' must be a non-empty string, got 7"),
        ("---\nname: broken\ndescription: ''\n---\n", "'description' must be a non-empty string"),
        ("---\nname: broken\ndescription: D.\nlicense: [MIT]\n---\n", "'license' must be"),
        ("---\nname: broken\ndescription: D.\nmetadata: x\n---\n", "'metadata' must be a mapping"),
        (
            "---\nname: broken\ndescription: D.\nmetadata: {a: {b: c}}\n---\n",
            "'metadata.a' must be a string, got dict",
        ),
        ("---\nname: broken\ndescription: D.\nallowed-tools: 3\n---\n", "'allowed-tools' must"),
    ],
)
def test_a_malformed_skill_md_names_its_file(tmp_path: Path, text: str, message: str) -> None:
    folder = write_raw(tmp_path, "broken", text)
    with pytest.raises(SkillError) as caught:
        Skill.from_dir(folder)
    assert message in str(caught.value)
    assert caught.value.path == str(folder.resolve() / "SKILL.md")
    assert str(caught.value).startswith(f"{caught.value.path}: ")
    assert isinstance(caught.value, BuilderError)  # a configuration mistake, found at load time
    assert isinstance(caught.value, DaimonError)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("PDF-Processing", "must be lowercase"),
        ("-pdf", "must not start or end with a hyphen"),
        ("pdf-", "must not start or end with a hyphen"),
        ("pdf--processing", "must not hold two hyphens in a row"),
        ("pdf_processing", "may hold only letters, digits and hyphens"),
        ("pdf processing", "may hold only letters, digits and hyphens"),
        ("a" * 65, "is 65 characters long; the most is 64"),
    ],
)
def test_names_follow_the_specification(tmp_path: Path, name: str, message: str) -> None:
    folder = write_raw(tmp_path, "skill", f"---\nname: {name}\ndescription: D.\n---\n")
    with pytest.raises(SkillError, match=message):
        Skill.from_dir(folder)


def test_the_longest_name_and_description_are_allowed(tmp_path: Path) -> None:
    name, description = "a" * 64, "d" * 1024
    skill = Skill.from_dir(
        write_raw(tmp_path, name, f"---\nname: {name}\ndescription: {description}\n---\n")
    )
    assert (len(skill.name), len(skill.description)) == (64, 1024)


def test_a_description_over_1024_characters_is_refused(tmp_path: Path) -> None:
    folder = write_raw(tmp_path, "long", f"---\nname: long\ndescription: {'d' * 1025}\n---\n")
    with pytest.raises(SkillError, match="'description' is 1025 characters long; the most is 1024"):
        Skill.from_dir(folder)


def test_compatibility_over_500_characters_is_refused(tmp_path: Path) -> None:
    text = f"---\nname: compat\ndescription: D.\ncompatibility: {'c' * 501}\n---\n"
    with pytest.raises(SkillError, match="'compatibility' is 501 characters long; the most is 500"):
        Skill.from_dir(write_raw(tmp_path, "compat", text))


def test_the_name_must_be_the_folders(tmp_path: Path) -> None:
    folder = write_raw(tmp_path, "pdf", "---\nname: pdf-tools\ndescription: D.\n---\n")
    with pytest.raises(
        SkillError, match="'name' 'pdf-tools' must be the name of its folder, 'pdf'"
    ):
        Skill.from_dir(folder)


def test_a_folder_without_skill_md_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SkillError, match=r"not a skill folder: it has no SKILL\.md"):
        Skill.from_dir(tmp_path)


def test_skill_md_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "latin"
    folder.mkdir()
    (folder / "SKILL.md").write_bytes(b"---\nname: latin\ndescription: caf\xe9\n---\n")
    with pytest.raises(SkillError, match="cannot be read"):
        Skill.from_dir(folder)


def test_a_folder_of_too_many_files_is_refused(write_skill: WriteSkill) -> None:
    folder = write_skill("huge", files={f"f{i}.txt": "" for i in range(1001)})
    with pytest.raises(SkillError, match="holds more than 1000 files"):
        Skill.from_dir(folder)


def test_without_pyyaml_the_error_names_the_extra(
    write_skill: WriteSkill, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_skill("needs-yaml")
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml now raises ImportError
    with pytest.raises(MissingDependencyError, match=r"daimon-agents\[skills\]"):
        Skill.from_dir(folder)
