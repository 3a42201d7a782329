"""Files in AG-UI user messages: they reach the model as daimon parts, or get a 4xx."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
from ag_ui.core import DataSource, DocumentPart, ImagePart, TextPart, UrlSource, UserMessage

from daimon import Agent, BuilderError, ChatRequest, ChatResponse
from daimon.core.messages import AudioPart as DaimonAudio
from daimon.core.messages import DocumentPart as DaimonDocument
from daimon.core.messages import ImagePart as DaimonImage
from daimon.models import FunctionModel
from daimon.server import ServerSettings

from .conftest import TOKEN, Calls, LiveServer
from .test_agui import AUTH, agui, run_input
from .test_flows import research

Live = Callable[..., LiveServer]

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
PDF = b"%PDF-1.4\n%%EOF\n"


def seer(calls: Calls) -> Agent:
    """Answers with the text it was given and each part's media type (and size or URL)."""

    def model(request: ChatRequest) -> ChatResponse:
        calls.requests.append(request)
        last = request.messages[-1]
        seen = [f"{p.media_type} {len(p.data)}B" if p.data else str(p.url) for p in last.media]
        return ChatResponse.reply(f"text={last.text!r}; " + ", ".join(seen))

    return Agent(FunctionModel(model, model_name="seer"), name="seer")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def with_parts(*parts: Any) -> dict[str, Any]:
    """A run input whose user message holds ``parts`` (SDK models or plain dicts)."""
    content = [
        p if isinstance(p, dict) else p.model_dump(by_alias=True, exclude_none=True) for p in parts
    ]
    return run_input(None, messages=[{"id": "m1", "role": "user", "content": content}])


def answer(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def refusal(server: LiveServer, body: dict[str, Any], status: int) -> str:
    reply = server.client().post("/agui", json=body, headers=AUTH)
    assert reply.status_code == status, reply.text
    return str(reply.json()["error"]["message"])


def test_an_image_and_a_pdf_reach_the_model_as_parts(live: Live) -> None:
    calls = Calls()
    server = live(seer(calls), token=TOKEN)
    message = UserMessage(
        id="m1",
        content=[
            TextPart(text="What is in these?"),
            ImagePart(source=DataSource(value=b64(PNG), mime_type="image/png")),
            DocumentPart(
                source=DataSource(value=b64(PDF), mime_type="application/pdf"),
                metadata={"filename": "report.pdf"},
            ),
        ],
    )
    body = run_input(None, messages=[message.model_dump(by_alias=True, exclude_none=True)])
    events = agui(server, body)
    assert (
        answer(events)
        == f"text='What is in these?'; image/png {len(PNG)}B, application/pdf {len(PDF)}B"
    )
    (request,) = calls.requests
    image, document = request.messages[-1].media
    assert isinstance(image, DaimonImage) and image.data == PNG
    assert isinstance(document, DaimonDocument) and document.data == PDF
    assert document.name == "report.pdf"


def test_audio_a_text_file_and_a_url_image_are_taken(live: Live) -> None:
    calls = Calls()
    server = live(seer(calls), token=TOKEN)
    body = with_parts(
        TextPart(text="Listen"),
        {
            "type": "audio",
            "source": {"type": "data", "value": b64(b"RIFF0000WAVE"), "mimeType": "audio/x-wav"},
        },
        DocumentPart(
            source=DataSource(value=b64(b"a,b\n1,2\n"), mime_type="text/csv; charset=utf-8")
        ),
        ImagePart(source=UrlSource(value="https://example.com/cat.png", mime_type="image/png")),
    )
    events = agui(server, body)
    assert (
        answer(events) == "text='Listen'; audio/wav 12B, text/csv 8B, https://example.com/cat.png"
    )
    audio, text, image = calls.requests[0].messages[-1].media
    assert isinstance(audio, DaimonAudio) and isinstance(text, DaimonDocument)
    assert text.is_text and isinstance(image, DaimonImage) and image.url is not None


def test_a_file_without_text_is_a_prompt(live: Live) -> None:
    server = live(seer(Calls()), token=TOKEN)
    body = with_parts(ImagePart(source=DataSource(value=b64(PNG), mime_type="image/png")))
    assert answer(agui(server, body)) == f"text=''; image/png {len(PNG)}B"


def test_a_media_type_the_server_does_not_take_is_415(live: Live) -> None:
    server = live(seer(Calls()), token=TOKEN)
    zipped = DocumentPart(source=DataSource(value=b64(b"PK"), mime_type="application/zip"))
    message = refusal(server, with_parts(TextPart(text="x"), zipped), 415)
    assert "messages[-1].content[1]: application/zip files are not accepted" in message
    assert "image/png" in message and "text/*" in message
    video = {"type": "video", "source": {"type": "data", "value": "AA==", "mimeType": "video/mp4"}}
    assert "video is not supported" in refusal(server, with_parts(video), 415)
    mismatch = ImagePart(source=DataSource(value=b64(PDF), mime_type="application/pdf"))
    assert "a part of type 'image' cannot hold application/pdf" in refusal(
        server, with_parts(mismatch), 415
    )


def test_file_types_can_be_narrowed(live: Live) -> None:
    server = live(seer(Calls()), token=TOKEN, file_types=("image/*",))
    pdf = DocumentPart(source=DataSource(value=b64(PDF), mime_type="application/pdf"))
    assert "accepted: image/*" in refusal(server, with_parts(pdf), 415)
    gif = ImagePart(source=DataSource(value=b64(b"GIF89a"), mime_type="image/gif"))
    assert answer(agui(server, with_parts(gif))) == "text=''; image/gif 6B"


def test_a_file_or_files_over_the_limits_are_413(live: Live) -> None:
    server = live(
        seer(Calls()), token=TOKEN, max_file_bytes=len(PNG), max_files_bytes=len(PNG) + 10
    )
    fits = ImagePart(source=DataSource(value=b64(PNG), mime_type="image/png"))
    big = ImagePart(source=DataSource(value=b64(PNG + b"!"), mime_type="image/png"))
    message = refusal(server, with_parts(big), 413)
    assert f"content[0]: the file is larger than {len(PNG)} bytes" in message
    assert "max_file_bytes" in message
    message = refusal(server, with_parts(fits, fits), 413)
    assert f"more than {len(PNG) + 10} bytes together" in message
    assert answer(agui(server, with_parts(fits))) == f"text=''; image/png {len(PNG)}B"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({"type": "data", "value": "not base64!", "mimeType": "image/png"}, "not valid base64"),
        ({"type": "file", "value": "file-abc", "mimeType": "image/png"}, "file handle"),
        (
            {"type": "url", "value": "ftp://example.com/a.png", "mimeType": "image/png"},
            "http(s) or data:",
        ),
        ({"type": "url", "value": "https://example.com/a.png"}, "mimeType is required"),
        ({"type": "url", "value": "data:image/png,abc", "mimeType": "image/png"}, "must be base64"),
    ],
)
def test_a_source_the_server_cannot_use_is_422(
    live: Live, source: dict[str, Any], expected: str
) -> None:
    server = live(seer(Calls()), token=TOKEN)
    message = refusal(server, with_parts({"type": "image", "source": source}), 422)
    assert expected in message and "content[0]" in message


def test_a_data_url_source_is_decoded(live: Live) -> None:
    server = live(seer(Calls()), token=TOKEN)
    source = {"type": "url", "value": f"data:image/png;base64,{b64(PNG)}", "mimeType": "image/png"}
    assert answer(agui(server, with_parts({"type": "image", "source": source}))) == (
        f"text=''; image/png {len(PNG)}B"
    )


def test_a_flow_takes_no_files(live: Live) -> None:
    server = live({"research": research()}, token=TOKEN)
    image = ImagePart(source=DataSource(value=b64(PNG), mime_type="image/png"))
    reply = server.client().post(
        "/agui/research", json=with_parts(TextPart(text="hi"), image), headers=AUTH
    )
    assert reply.status_code == 422
    assert (
        "'research' is a flow: it takes a text prompt, not files"
        in reply.json()["error"]["message"]
    )


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"max_file_bytes": 0}, "max_file_bytes must be a positive integer"),
        ({"max_files_bytes": 1.5}, "max_files_bytes must be a positive integer"),
        ({"file_types": ("png",)}, "'png' is not a media type"),
        ({"file_types": "image/png"}, "file_types must be a tuple"),
    ],
)
def test_bad_file_limits_are_refused(settings: dict[str, Any], expected: str) -> None:
    with pytest.raises(BuilderError, match=expected.replace("(", r"\(")):
        ServerSettings(**settings)
