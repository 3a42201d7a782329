from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest

# Payloads that other serializers would turn into code or foreign objects. Stored with a valid
# checksum (an attacker with write access to the store), each must raise SerializationError.
REVIVING_PAYLOADS: dict[str, bytes] = {
    "__class__": b'{"daimon":1,"data":{"run_id":"r","__class__":"os.system"}}',
    "py/object": b'{"daimon":1,"data":{"run_id":"r","custom":{"x":{"py/object":"os.Popen"}}}}',
    "pickle": (
        b"\x80\x04\x95\x1c\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93"
        b"\x94\x8c\x02id\x94\x85\x94R\x94."
    ),
    "type-tag": b'{"daimon":1,"data":{"run_id":"r","messages":[{"kind":"tool_call","id":"x",'
    b'"name":"rm"}]}}',
    "langchain": b'{"lc":1,"type":"constructor","id":["os","system"],"kwargs":{}}',
    "secret": b'{"daimon":1,"data":{"run_id":"r","custom":{"k":{"lc":1,"type":"secret",'
    b'"id":["OPENAI_API_KEY"],"__reduce__":1}}}}',
    "newer-version": b'{"daimon":2,"data":{"run_id":"r"}}',
}


def forge_record(payload: bytes, seq: int, saved_at: int) -> bytes:
    """A record in the documented format, with a valid checksum, around any payload."""
    digest = hashlib.sha256(b"%d:%d:" % (seq, saved_at) + payload).hexdigest()
    head = '{"daimon_checkpoint":1,"seq":%d,"saved_at":%d,"sha256":"%s","state":'
    return (head % (seq, saved_at, digest)).encode() + payload + b"}"


@pytest.fixture
def forge() -> Callable[[bytes, int, int], bytes]:
    """Builds checksum-valid records around arbitrary payloads."""
    return forge_record


@pytest.fixture(params=sorted(REVIVING_PAYLOADS))
def reviving_payload(request: pytest.FixtureRequest) -> bytes:
    """Each of the code-reviving payloads in turn."""
    return REVIVING_PAYLOADS[request.param]
