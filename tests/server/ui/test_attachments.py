"""Files in the playground: attached by button or dropped, shown as chips, sent to the model."""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from playwright.sync_api import expect

from .conftest import Shots, looker
from .test_accessibility import audit

if TYPE_CHECKING:
    from playwright.sync_api import FilePayload, Page

Live = Callable[..., Any]
"""tests/server's ``live`` fixture: ``live(agents, **settings)`` starts a server."""


def png() -> bytes:
    """A 1x1 PNG, written here: a real image, so the thumbnail loads."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00\xff")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


PNG = png()
PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"


def choose(page: Page, *files: tuple[str, str, bytes]) -> None:
    """Pick ``files`` (name, media type, bytes) through the Attach button's file chooser."""
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Attach files").click()
    payloads: list[FilePayload] = [{"name": n, "mimeType": t, "buffer": b} for n, t, b in files]
    chooser.value.set_files(payloads)


def test_chosen_files_show_as_chips_and_reach_the_model(
    live: Live, page: Page, shots: Shots
) -> None:
    server = live({"looker": looker()}, ui=True)
    page.goto(server.url)
    expect(page.get_by_label("Agent")).to_be_enabled()

    choose(page, ("cat.png", "image/png", PNG), ("report.pdf", "application/pdf", PDF))
    chips = page.get_by_role("list", name="Files to send")
    expect(chips.get_by_role("listitem")).to_have_count(2)
    expect(chips).to_contain_text(f"cat.png ({len(PNG)} B)")
    expect(chips).to_contain_text("report.pdf")
    expect(page.get_by_role("status")).to_have_text("2 files attached.")
    audit(page, "files-attached")
    shots(page, "attached")

    box = page.get_by_label("Message")
    box.fill("What is in these?")
    box.press("Control+Enter")
    answer = page.get_by_test_id("answer").last
    expect(answer).to_contain_text(
        f"text: 'What is in these?'; files: image/png {len(PNG)} bytes; "
        f"application/pdf {len(PDF)} bytes report.pdf"
    )
    # The prompt in the chat names its files, with a thumbnail of the image.
    sent = page.get_by_test_id("prompt").last.get_by_role("list", name="Attached files")
    expect(sent.get_by_role("listitem")).to_have_count(2)
    expect(sent).to_contain_text("cat.png")
    expect(sent).to_contain_text("report.pdf")
    thumbnail = sent.locator("img.thumbnail")
    expect(thumbnail).to_have_count(1)
    expect(thumbnail).to_have_attribute("src", re.compile(r"^data:image/png;base64,"))
    assert thumbnail.evaluate("img => img.complete && img.naturalWidth") == 1
    # Sent once: the next prompt goes without them.
    expect(chips).to_be_hidden()
    box.fill("And now?")
    box.press("Control+Enter")
    expect(page.get_by_test_id("answer").last).to_contain_text("text: 'And now?'; files: none")
    audit(page, "files-sent")
    shots(page, "sent")

    # The session, resumed from the server's memory, still lists the first prompt's files.
    page.reload()
    page.get_by_role("button", name=re.compile(r"^What is in these\?")).click()
    kept = page.get_by_test_id("prompt").first.get_by_role("list", name="Attached files")
    expect(kept).to_contain_text("image/png")  # an image keeps no name: its type stands in
    expect(kept).to_contain_text("report.pdf")
    expect(kept.locator("img.thumbnail")).to_have_attribute(
        "src", re.compile(r"^data:image/png;base64,")
    )


def test_a_chip_can_be_removed_and_a_file_alone_is_a_prompt(live: Live, page: Page) -> None:
    server = live({"looker": looker()}, ui=True)
    page.goto(server.url)
    expect(page.get_by_label("Agent")).to_be_enabled()
    choose(page, ("a.png", "image/png", PNG), ("notes.md", "", b"# Notes\n"))
    page.get_by_role("button", name="Remove a.png").click()
    chips = page.get_by_role("list", name="Files to send")
    expect(chips.get_by_role("listitem")).to_have_count(1)
    expect(page.get_by_label("Message")).to_be_focused()
    page.get_by_role("button", name="Send").click()
    # No type from the browser: the page sends a Markdown file as text/markdown.
    expect(page.get_by_test_id("answer").last).to_contain_text(
        "text: ''; files: text/markdown 8 bytes notes.md"
    )


def test_files_dropped_on_the_message_box_are_attached(live: Live, page: Page) -> None:
    server = live({"looker": looker()}, ui=True)
    page.goto(server.url)
    expect(page.get_by_label("Agent")).to_be_enabled()
    transfer = page.evaluate_handle(
        """() => {
          const transfer = new DataTransfer();
          transfer.items.add(new File(["a,b\\n1,2\\n"], "data.csv", { type: "text/csv" }));
          return transfer;
        }"""
    )
    box = page.get_by_label("Message")
    box.dispatch_event("dragenter", {"dataTransfer": transfer})
    expect(page.locator("#composer")).to_have_class(re.compile(r"\bdropping\b"))
    box.dispatch_event("drop", {"dataTransfer": transfer})
    expect(page.locator("#composer")).not_to_have_class(re.compile(r"\bdropping\b"))
    chips = page.get_by_role("list", name="Files to send")
    expect(chips).to_contain_text("data.csv (8 B)")
    box.fill("Sum the column")
    box.press("Control+Enter")
    expect(page.get_by_test_id("answer").last).to_contain_text(
        "text: 'Sum the column'; files: text/csv 8 bytes data.csv"
    )


def test_a_file_the_server_refuses_shows_why(live: Live, page: Page) -> None:
    server = live({"looker": looker()}, ui=True, max_file_bytes=16)
    page.goto(server.url)
    expect(page.get_by_label("Agent")).to_be_enabled()
    choose(page, ("big.pdf", "application/pdf", PDF))
    page.get_by_label("Message").fill("Read it")
    page.get_by_role("button", name="Send").click()
    error = page.get_by_role("alert").filter(has_text="the file is larger than 16 bytes")
    expect(error).to_be_visible()
