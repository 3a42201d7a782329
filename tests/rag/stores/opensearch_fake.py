"""A local OpenSearch endpoint for the k-NN adapter, written from OpenSearch's REST API reference.

No OpenSearch server can run on this machine, so :class:`OpenSearchFake` serves, over real HTTP
on loopback (Starlette under uvicorn, in a background thread), the endpoints that
``OpenSearchVectorStore`` uses, with OpenSearch's request and response shapes:

- ``HEAD/GET/PUT/DELETE /{index}`` and ``GET /{index}/_mapping``: ``index.knn`` settings and a
  ``knn_vector`` mapping (``dimension``, ``method`` with ``space_type``/``engine``), dynamic
  mapping with ``dynamic_templates``, ``"enabled": false`` objects;
- ``POST [/{index}]/_bulk``: NDJSON ``index``/``create``/``delete`` actions with per-item results
  and errors, auto-creating a missing index as a real cluster does;
- ``POST /{index}/_search``: a ``knn`` query with an efficient ``filter``, ``match_all`` and the
  ``bool``/``term``/``terms``/``range``/``exists``/``ids`` filters, ``size``/``from``, ``_source``
  includes/excludes;
- ``DELETE /{index}/_doc/{id}``, ``POST /{index}/_delete_by_query``, ``POST /{index}/_count``,
  ``POST /{index}/_refresh``;
- error bodies shaped ``{"error": {"root_cause": [...], "type", "reason"}, "status"}``
  (``index_not_found_exception``, ``resource_already_exists_exception``,
  ``mapper_parsing_exception``, ``illegal_argument_exception``, ``parsing_exception``, ...).

Like a real cluster, writes become visible to ``_search`` and ``_count`` only after a refresh
(the ``refresh`` parameter or ``_refresh``), and ``size`` defaults to 10.

Where it differs from a cluster: one shard and no replicas; k-NN search is exact (a cluster's
HNSW graph is approximate), scored with OpenSearch's documented formulas per space
(``l2``: ``1 / (1 + d²)``; ``cosinesimil``: ``(2 - (1 - cos)) / 2``; ``innerproduct``:
``dot + 1`` when ``dot > 0``, else ``1 / (1 - dot)``); text fields use a simple
lowercase-word analyzer.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from daimon.testing.models import LoopbackServer

__all__ = ("OpenSearchFake", "RecordedCall")

_NUMERIC = {"long", "integer", "short", "byte", "double", "float", "half_float", "scaled_float"}
_INTEGRAL = {"long", "integer", "short", "byte"}
_SPACES = {"l2", "cosinesimil", "innerproduct", "l1", "linf"}
_ENGINES = {"lucene", "faiss", "nmslib"}
_BAD_INDEX_CHARS = set('\\/*?"<>| ,#:')
_JSON = "application/json; charset=UTF-8"


class _OSError(Exception):
    """An OpenSearch error response."""

    def __init__(self, status: int, type: str, reason: str, **extra: Any) -> None:
        super().__init__(reason)
        self.status = status
        self.type = type
        self.reason = reason
        self.extra = extra

    def body(self) -> dict[str, Any]:
        cause = {"type": self.type, "reason": self.reason, **self.extra}
        return {"error": {"root_cause": [cause], **cause}, "status": self.status}


def _index_not_found(name: str) -> _OSError:
    return _OSError(
        404,
        "index_not_found_exception",
        f"no such index [{name}]",
        index=name,
        **{"resource.type": "index_or_alias", "resource.id": name, "index_uuid": "_na_"},
    )


@dataclass(frozen=True)
class RecordedCall:
    """One request the fake received."""

    method: str
    path: str
    params: dict[str, str]
    body: Any


@dataclass
class _Index:
    name: str
    settings: dict[str, Any]
    mappings: dict[str, Any]
    uuid: str = field(default_factory=lambda: uuid.uuid4().hex[:22])
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Live documents (what a realtime GET sees)."""
    visible: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Documents as of the last refresh (what search and count see)."""
    versions: dict[str, int] = field(default_factory=dict)
    seq_no: int = -1
    _matrices: dict[str, tuple[list[str], Any]] = field(default_factory=dict)

    def refresh(self) -> None:
        self.visible = dict(self.docs)
        self._matrices.clear()

    def matrix(self, path: str) -> tuple[list[str], Any]:
        """Ids and a float32 matrix of the visible vectors in field ``path``."""
        if path not in self._matrices:
            ids, rows = [], []
            for doc_id, source in self.visible.items():
                values = _lookup(source, path)
                if isinstance(values, list) and values:
                    ids.append(doc_id)
                    rows.append(values)
            matrix = np.asarray(rows, dtype=np.float32) if rows else np.zeros((0, 0), np.float32)
            self._matrices[path] = (ids, matrix)
        return self._matrices[path]


# ---------------------------------------------------------------------- helpers


def _lookup(source: Any, path: str) -> Any:
    node = source
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _leaves(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def _flat_settings(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flat_settings(value, name + "."))
        else:
            flat[name if name.startswith("index.") else "index." + name] = value
    return flat


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """Flat ``a.b.c`` settings as nested objects of strings, as ``GET /{index}`` shows them."""
    nested: dict[str, Any] = {}
    for key, value in sorted(flat.items()):
        text = value if isinstance(value, str) else json.dumps(value).strip('"')
        node = nested
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):  # a shorter key is a leaf here: keep the rest dotted
                node[".".join(parts[i:])] = text
                break
            node = child
        else:
            node[parts[-1]] = text
    return nested


def _field_type(mappings: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The mapping of field ``path`` (``a.b`` through objects, ``a.keyword`` for subfields)."""
    node: dict[str, Any] | None = {"properties": mappings.get("properties", {})}
    parts = path.split(".")
    for i, part in enumerate(parts):
        if node is None:
            return None
        props = node.get("properties")
        if props is not None and part in props:
            node = props[part]
            continue
        subfields = node.get("fields")
        if subfields is not None and part in subfields and i == len(parts) - 1:
            return dict(subfields[part])
        return None
    return node


def _tokens(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    return None


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


# ---------------------------------------------------------------------- mapping


def _validate_mapping(properties: dict[str, Any], prefix: str = "") -> None:
    for name, spec in properties.items():
        path = prefix + name
        if not isinstance(spec, dict):
            raise _OSError(400, "mapper_parsing_exception", f"Expected map for property [{path}]")
        kind = spec.get("type", "object" if "properties" in spec else None)
        if kind is None:
            raise _OSError(400, "mapper_parsing_exception", f"No type specified for field [{path}]")
        if kind in ("object", "nested"):
            _validate_mapping(spec.get("properties", {}), path + ".")
        elif kind == "knn_vector":
            dimension = spec.get("dimension")
            if not isinstance(dimension, int) or isinstance(dimension, bool):
                raise _OSError(
                    400, "mapper_parsing_exception", f"Dimension value missing for vector: {path}"
                )
            if not 1 <= dimension <= 16000:
                raise _OSError(
                    400,
                    "mapper_parsing_exception",
                    f"Dimension value cannot be greater than 16000 or less than 1 for vector: "
                    f"{path}",
                )
            method = spec.get("method", {})
            space = method.get("space_type", spec.get("space_type", "l2"))
            engine = method.get("engine", "faiss")
            if space not in _SPACES:
                raise _OSError(
                    400, "mapper_parsing_exception", f"Unable to parse space type [{space}]"
                )
            if engine not in _ENGINES:
                raise _OSError(400, "mapper_parsing_exception", f"Invalid engine type [{engine}]")
            if method and method.get("name", "hnsw") != "hnsw":
                raise _OSError(
                    400,
                    "mapper_parsing_exception",
                    f"method [{method.get('name')}] needs training, which this server lacks",
                )
        elif kind not in {"keyword", "text", "boolean", *_NUMERIC}:
            raise _OSError(
                400,
                "mapper_parsing_exception",
                f"No handler for type [{kind}] declared on field [{path}]",
            )


def _space(spec: dict[str, Any]) -> str:
    space: str = spec.get("method", {}).get("space_type", spec.get("space_type", "l2"))
    return space


def _dynamic_spec(mappings: dict[str, Any], path: str, value: Any) -> dict[str, Any] | None:
    """The mapping a new field gets: the first matching dynamic template, else the default."""
    if isinstance(value, bool):
        detected = "boolean"
    elif isinstance(value, int):
        detected = "long"
    elif isinstance(value, float):
        detected = "double"
    elif isinstance(value, str):
        detected = "string"
    elif isinstance(value, dict):
        detected = "object"
    else:
        return None
    for template in mappings.get("dynamic_templates", []):
        (body,) = template.values()
        wanted = body.get("match_mapping_type", "*")
        if wanted not in ("*", detected):
            continue
        if "path_match" in body and not _glob(body["path_match"], path):
            continue
        if "match" in body and not _glob(body["match"], path.rsplit(".", 1)[-1]):
            continue
        return dict(body.get("mapping", {}))
    return {
        "boolean": {"type": "boolean"},
        "long": {"type": "long"},
        "double": {"type": "float"},
        "string": {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}},
        "object": {"properties": {}},
    }[detected]


def _glob(pattern: str, text: str) -> bool:
    return re.fullmatch(re.escape(pattern).replace(r"\*", ".*"), text) is not None


def _parse_fail(path: str, kind: str, doc_id: str, why: str) -> _OSError:
    return _OSError(
        400,
        "mapper_parsing_exception",
        f"failed to parse field [{path}] of type [{kind}] in document with id '{doc_id}'. "
        f"Preview of field's value: '{why}'",
    )


def _check_leaf(path: str, spec: dict[str, Any], value: Any, doc_id: str) -> None:
    kind = spec.get("type", "object")
    if kind == "knn_vector":
        if not isinstance(value, list) or not all(
            _as_number(v) is not None and not isinstance(v, str) for v in value
        ):
            raise _parse_fail(path, kind, doc_id, str(value)[:40])
        if any(abs(v) > 3.4028234663852886e38 for v in value):
            raise _OSError(
                400, "illegal_argument_exception", "KNN vector values cannot be infinity"
            )
        if len(value) != spec["dimension"]:
            raise _OSError(
                400,
                "mapper_parsing_exception",
                f"Vector dimension mismatch. Expected: {spec['dimension']}, Given: {len(value)}",
            )
        if _space(spec) == "cosinesimil" and not any(value):
            raise _OSError(
                400,
                "illegal_argument_exception",
                "zero vector is not supported when space type is [cosinesimil]",
            )
        return
    for leaf in _leaves(value):
        if isinstance(leaf, dict):
            raise _OSError(
                400,
                "mapper_parsing_exception",
                f"failed to parse field [{path}] of type [{kind}] in document with id "
                f"'{doc_id}'. Preview of field's value: '{leaf}'",
            )
        if kind in _NUMERIC:
            number = _as_number(leaf)
            if number is None or (kind in _INTEGRAL and not float(number).is_integer()):
                raise _parse_fail(path, kind, doc_id, str(leaf))
        elif kind == "boolean" and _as_bool(leaf) is None:
            raise _parse_fail(path, kind, doc_id, str(leaf))


def _map_document(mappings: dict[str, Any], source: dict[str, Any], doc_id: str) -> None:
    """Check ``source`` against ``mappings``, adding dynamic fields to it (mutates ``mappings``)."""

    def walk(node: dict[str, Any], obj: dict[str, Any], prefix: str) -> None:
        props = node.setdefault("properties", {})
        dynamic = node.get("dynamic", mappings.get("dynamic", True))
        for key, value in obj.items():
            path = prefix + key
            spec = props.get(key)
            if spec is None:
                if value is None or (isinstance(value, list) and not _leaves(value)):
                    continue
                if dynamic in (False, "false"):
                    continue
                if dynamic == "strict":
                    raise _OSError(
                        400,
                        "strict_dynamic_mapping_exception",
                        f"mapping set to strict, dynamic introduction of [{key}] within "
                        f"[{prefix.rstrip('.') or '_doc'}] is not allowed",
                    )
                sample = _leaves(value)[0] if isinstance(value, list) else value
                spec = _dynamic_spec(mappings, path, sample)
                if spec is None:
                    continue
                props[key] = spec
            if spec.get("enabled") is False:
                continue
            if spec.get("type", "object") in ("object", "nested"):
                items = value if isinstance(value, list) else [value]
                for item in items:
                    if item is None:
                        continue
                    if not isinstance(item, dict):
                        raise _OSError(
                            400,
                            "mapper_parsing_exception",
                            f"object mapping for [{path}] tried to parse field [{key}] as "
                            "object, but found a concrete value",
                        )
                    walk(spec, item, path + ".")
            else:
                _check_leaf(path, spec, value, doc_id)

    walk(mappings, source, "")


# ---------------------------------------------------------------------- queries


def _term_matches(spec: dict[str, Any] | None, values: list[Any], term: Any, path: str) -> bool:
    if spec is None:
        return False
    kind = spec.get("type")
    if kind in _NUMERIC:
        wanted = _as_number(term)
        if wanted is None:
            raise _OSError(
                400,
                "query_shard_exception",
                f'failed to create query: For input string: "{term}"',
            )
        return any(_as_number(v) == wanted for v in values)
    if kind == "boolean":
        wanted_bool = _as_bool(term)
        if wanted_bool is None:
            raise _OSError(
                400,
                "query_shard_exception",
                f"failed to create query: Can't parse boolean value [{term}], expected [true] "
                "or [false]",
            )
        return any(_as_bool(v) == wanted_bool for v in values)
    if kind == "text":
        return any(str(term) in _tokens(str(v)) for v in values)
    if kind == "keyword":
        text = json.dumps(term) if isinstance(term, bool) else str(term)
        return any((json.dumps(v) if isinstance(v, bool) else str(v)) == text for v in values)
    raise _OSError(
        400,
        "query_shard_exception",
        f"failed to create query: Field [{path}] of type [{kind}] does not support term queries",
    )


def _in_range(spec: dict[str, Any] | None, values: list[Any], bounds: dict[str, Any]) -> bool:
    if spec is None:
        return False
    numeric = spec.get("type") in _NUMERIC

    def key(value: Any) -> Any:
        return _as_number(value) if numeric else str(value)

    for value in values:
        v = key(value)
        if v is None:
            continue
        ok = True
        for op, bound in bounds.items():
            if op not in ("gt", "gte", "lt", "lte"):
                continue
            b = key(bound)
            if b is None:
                raise _OSError(400, "query_shard_exception", f'failed to create query: "{bound}"')
            ok = (
                ok
                and {
                    "gt": v > b,
                    "gte": v >= b,
                    "lt": v < b,
                    "lte": v <= b,
                }[op]
            )
        if ok:
            return True
    return False


def _one(clause: Any, name: str) -> tuple[str, Any]:
    if not isinstance(clause, dict) or len(clause) != 1:
        raise _OSError(400, "parsing_exception", f"[{name}] query malformed, no start_object")
    ((key, value),) = clause.items()
    return key, value


def _compile(query: Any, index: _Index) -> Callable[[str, dict[str, Any]], bool]:
    """A predicate over (id, source) for a query-DSL filter."""
    kind, body = _one(query, "query")
    mappings = index.mappings
    if kind == "match_all":
        return lambda _id, _src: True
    if kind == "ids":
        wanted = set(body.get("values", []))
        return lambda doc_id, _src: doc_id in wanted
    if kind == "bool":
        if not isinstance(body, dict):
            raise _OSError(400, "parsing_exception", "[bool] query malformed")

        def clauses(name: str) -> list[Callable[[str, dict[str, Any]], bool]]:
            raw = body.get(name, [])
            return [_compile(c, index) for c in (raw if isinstance(raw, list) else [raw])]

        unknown = set(body) - {"must", "filter", "should", "must_not", "minimum_should_match"}
        if unknown:
            raise _OSError(
                400, "parsing_exception", f"[bool] query does not support [{sorted(unknown)[0]}]"
            )
        must = clauses("must") + clauses("filter")
        should = clauses("should")
        must_not = clauses("must_not")
        minimum = int(body.get("minimum_should_match", 0 if must else 1 if should else 0))

        def check(doc_id: str, src: dict[str, Any]) -> bool:
            return (
                all(c(doc_id, src) for c in must)
                and not any(c(doc_id, src) for c in must_not)
                and sum(1 for c in should if c(doc_id, src)) >= minimum
            )

        return check
    if kind in ("term", "terms", "range", "exists"):
        if kind == "exists":
            path = body.get("field") if isinstance(body, dict) else None
            if not isinstance(path, str):
                raise _OSError(400, "parsing_exception", "[exists] must be provided with a [field]")
            return lambda _id, src: bool(_leaves(_lookup(src, path)))
        path, arg = _one(body, kind)
        spec = _field_type(mappings, path)
        parent_path, _, last = path.rpartition(".")
        parent = _field_type(mappings, parent_path) if parent_path else None
        # a subfield (``tag.keyword``) indexes its parent's value
        source_path = parent_path if parent and last in parent.get("fields", {}) else path
        if kind == "term":
            term = arg.get("value") if isinstance(arg, dict) else arg
            if spec is not None:
                _term_matches(spec, [], term, path)  # type errors surface even with no documents
            return lambda _id, src: _term_matches(
                spec, _leaves(_lookup(src, source_path)), term, path
            )
        if kind == "terms":
            if not isinstance(arg, list):
                raise _OSError(
                    400, "parsing_exception", "[terms] query does not support [" + path + "]"
                )
            return lambda _id, src: any(
                _term_matches(spec, _leaves(_lookup(src, source_path)), t, path) for t in arg
            )
        if not isinstance(arg, dict):
            raise _OSError(400, "parsing_exception", f"[range] query malformed for [{path}]")
        return lambda _id, src: _in_range(spec, _leaves(_lookup(src, source_path)), arg)
    raise _OSError(400, "parsing_exception", f"unknown query [{kind}]", line=1, col=1)


def _knn_scores(space: str, matrix: Any, vector: Any) -> Any:
    if space == "l2":
        d = ((matrix - vector) ** 2).sum(axis=1)
        return 1.0 / (1.0 + d)
    if space == "l1":
        return 1.0 / (1.0 + np.abs(matrix - vector).sum(axis=1))
    if space == "linf":
        return 1.0 / (1.0 + np.abs(matrix - vector).max(axis=1))
    if space == "cosinesimil":
        norms = np.linalg.norm(matrix, axis=1) * float(np.linalg.norm(vector))
        cos = (matrix @ vector) / np.where(norms == 0, 1.0, norms)
        return (2.0 - (1.0 - cos)) / 2.0
    dot = matrix @ vector
    return np.where(dot > 0, dot + 1.0, 1.0 / (1.0 - np.minimum(dot, 0.0)))


def _select_source(source: dict[str, Any], spec: Any) -> dict[str, Any] | None:
    if spec is False:
        return None
    if spec is None or spec is True:
        return source
    includes: list[str]
    excludes: list[str]
    if isinstance(spec, (str, list)):
        includes, excludes = ([spec] if isinstance(spec, str) else spec), []
    else:
        includes, excludes = spec.get("includes", []), spec.get("excludes", [])

    def hit(patterns: list[str], key: str) -> bool:
        return any(_glob(p, key) or p.startswith(key + ".") for p in patterns)

    return {
        k: v
        for k, v in source.items()
        if (not includes or hit(includes, k)) and not any(_glob(p, k) for p in excludes)
    }


# ---------------------------------------------------------------------- server


class OpenSearchFake(LoopbackServer):
    """An OpenSearch REST endpoint on ``127.0.0.1`` holding indices in memory.

    Use it as a context manager; :attr:`url` is where to point ``AsyncOpenSearch``.
    """

    def __init__(self) -> None:
        methods = ["GET", "HEAD", "POST", "PUT", "DELETE"]
        app = Starlette(routes=[Route("/{path:path}", self._handle, methods=methods)])
        super().__init__(app, name="OpenSearch fake")
        self._lock = threading.Lock()
        self._indices: dict[str, _Index] = {}
        self._calls: list[RecordedCall] = []
        self._faults: list[tuple[int, dict[str, Any]]] = []

    # ------------------------------------------------------------------ inspection
    @property
    def calls(self) -> list[RecordedCall]:
        """Requests received so far, oldest first."""
        with self._lock:
            return list(self._calls)

    def indices(self) -> list[str]:
        """Names of the indices that exist."""
        with self._lock:
            return sorted(self._indices)

    def mapping(self, name: str) -> dict[str, Any]:
        """The current mapping of an index."""
        with self._lock:
            return json.loads(json.dumps(self._indices[name].mappings))

    def documents(self, name: str) -> dict[str, dict[str, Any]]:
        """The live documents of an index, by id."""
        with self._lock:
            return json.loads(json.dumps(self._indices[name].docs))

    def fail_next(self, status: int, body: dict[str, Any]) -> None:
        """Answer the next request with this status and JSON body instead of serving it."""
        with self._lock:
            self._faults.append((status, body))

    def reset(self) -> None:
        """Drop every index and recorded call."""
        with self._lock:
            self._indices.clear()
            self._calls.clear()
            self._faults.clear()

    # ------------------------------------------------------------------ dispatch
    async def _handle(self, request: Request) -> Response:
        raw = await request.body()
        path = request.url.path
        params = dict(request.query_params)
        parts = [p for p in path.split("/") if p]
        method = request.method
        with self._lock:
            body: Any
            if parts and parts[-1] == "_bulk":
                body = raw.decode()
            else:
                try:
                    body = json.loads(raw) if raw.strip() else None
                except ValueError:
                    body = raw.decode(errors="replace")
            self._calls.append(RecordedCall(method, path, params, body))
            if self._faults:
                status, fault = self._faults.pop(0)
                return JSONResponse(fault, status_code=status, media_type=_JSON)
            try:
                if isinstance(body, str) and not (parts and parts[-1] == "_bulk"):
                    raise _OSError(
                        400, "x_content_parse_exception", "[1:1] Unexpected character in body"
                    )
                status, payload = self._route(method, parts, params, body)
            except _OSError as exc:
                status, payload = exc.status, exc.body()
        if method == "HEAD":
            return Response(status_code=status)
        return JSONResponse(payload, status_code=status, media_type=_JSON)

    def _route(
        self, method: str, parts: list[str], params: dict[str, str], body: Any
    ) -> tuple[int, Any]:
        if not parts:
            return 200, {
                "name": "fake-node",
                "cluster_name": "daimon-fake",
                "version": {"distribution": "opensearch", "number": "2.19.0"},
                "tagline": "The OpenSearch Project: https://opensearch.org/",
            }
        if parts == ["_bulk"] and method in ("POST", "PUT"):
            return self._bulk(None, body, params)
        name = parts[0]
        if len(parts) == 1:
            if method == "HEAD":
                return (200 if name in self._indices else 404), None
            if method == "PUT":
                return self._create(name, body or {})
            if method == "GET":
                index = self._get(name)
                return 200, {
                    name: {
                        "aliases": {},
                        "mappings": index.mappings,
                        "settings": {"index": _nest(index.settings)["index"]},
                    }
                }
            if method == "DELETE":
                self._get(name)
                del self._indices[name]
                return 200, {"acknowledged": True}
        action = parts[1]
        if len(parts) == 2:
            if action == "_mapping" and method == "GET":
                return 200, {name: {"mappings": self._get(name).mappings}}
            if action == "_bulk" and method in ("POST", "PUT"):
                return self._bulk(name, body, params)
            if action == "_search" and method in ("GET", "POST"):
                return self._search(self._get(name), body or {})
            if action == "_count" and method in ("GET", "POST"):
                index = self._get(name)
                query = (body or {}).get("query", {"match_all": {}})
                check = _compile(query, index)
                count = sum(1 for i, s in index.visible.items() if check(i, s))
                return 200, {"count": count, "_shards": _shards()}
            if action == "_delete_by_query" and method == "POST":
                return self._delete_by_query(self._get(name), body, params)
            if action == "_refresh" and method in ("GET", "POST"):
                self._get(name).refresh()
                return 200, {"_shards": _shards()}
        if len(parts) == 3 and action == "_doc":
            index = self._get(name)
            doc_id = parts[2]
            if method == "DELETE":
                return self._delete(index, doc_id, params)
            if method == "GET":
                found = doc_id in index.docs
                reply: dict[str, Any] = {"_index": name, "_id": doc_id, "found": found}
                if found:
                    reply.update(_version=index.versions[doc_id], _source=index.docs[doc_id])
                return (200 if found else 404), reply
        raise _OSError(
            405 if len(parts) <= 2 else 400,
            "illegal_argument_exception",
            f"no handler found for uri [/{'/'.join(parts)}] and method [{method}]",
        )

    def _get(self, name: str) -> _Index:
        index = self._indices.get(name)
        if index is None:
            raise _index_not_found(name)
        return index

    # ------------------------------------------------------------------ indices
    def _create(self, name: str, body: Any, *, check: bool = True) -> tuple[int, Any]:
        if check:
            if (
                name != name.lower()
                or name.startswith(("_", "-", "+"))
                or name in (".", "..")
                or _BAD_INDEX_CHARS & set(name)
            ):
                raise _OSError(
                    400,
                    "invalid_index_name_exception",
                    f"Invalid index name [{name}], must be lowercase and must not contain "
                    'the following characters [ , ", *, \\, <, |, ,, >, /, ?]',
                    index=name,
                    index_uuid="_na_",
                )
            if name in self._indices:
                existing = self._indices[name]
                raise _OSError(
                    400,
                    "resource_already_exists_exception",
                    f"index [{name}/{existing.uuid}] already exists",
                    index=name,
                    index_uuid=existing.uuid,
                )
        if not isinstance(body, dict):
            raise _OSError(400, "parse_exception", "request body is required")
        unknown = set(body) - {"settings", "mappings", "aliases"}
        if unknown:
            raise _OSError(
                400,
                "illegal_argument_exception",
                f"unknown key [{sorted(unknown)[0]}] for create index",
            )
        settings = _flat_settings(body.get("settings", {}))
        settings.setdefault("index.number_of_shards", "1")
        settings.setdefault("index.number_of_replicas", "1")
        mappings = json.loads(json.dumps(body.get("mappings", {})))
        _validate_mapping(mappings.get("properties", {}))
        mappings.setdefault("properties", {})
        self._indices[name] = _Index(name=name, settings=settings, mappings=mappings)
        return 200, {"acknowledged": True, "shards_acknowledged": True, "index": name}

    # ------------------------------------------------------------------ documents
    def _bulk(self, default: str | None, body: Any, params: dict[str, str]) -> tuple[int, Any]:
        started = time.perf_counter()
        if not isinstance(body, str) or not body.strip():
            raise _OSError(400, "action_request_validation_exception", "no requests added;")
        if not body.endswith("\n"):
            raise _OSError(
                400,
                "illegal_argument_exception",
                "The bulk request must be terminated by a newline [\\n]",
            )
        lines = iter(body.splitlines())
        items: list[dict[str, Any]] = []
        touched: set[str] = set()
        for line in lines:
            if not line.strip():
                continue
            try:
                action_line = json.loads(line)
                op, meta = _one(action_line, "bulk")
            except (ValueError, _OSError):
                raise _OSError(
                    400, "illegal_argument_exception", f"Malformed action/metadata line [{line}]"
                ) from None
            if op not in ("index", "create", "delete"):
                raise _OSError(
                    400,
                    "illegal_argument_exception",
                    f"Malformed action/metadata line, expected one of [create, delete, index, "
                    f"update] but found [{op}]",
                )
            name = meta.get("_index", default)
            if name is None:
                raise _OSError(400, "action_request_validation_exception", "index is missing;")
            doc_id = meta.get("_id")
            if doc_id is not None and len(str(doc_id).encode()) > 512:
                raise _OSError(
                    400,
                    "action_request_validation_exception",
                    f"Validation Failed: 1: id [{doc_id}] is too long, must be no longer than 512 "
                    f"bytes but was: {len(str(doc_id).encode())};",
                )
            if op == "delete":
                items.append({"delete": self._bulk_delete(name, doc_id)})
                touched.add(name)
                continue
            source_line = next(lines, None)
            try:
                source = json.loads(source_line) if source_line is not None else None
            except ValueError:
                source = None
            if not isinstance(source, dict):
                raise _OSError(400, "x_content_parse_exception", "[1:1] malformed document source")
            items.append({op: self._bulk_index(name, doc_id, source, create=op == "create")})
            touched.add(name)
        if params.get("refresh") in ("", "true", "wait_for"):
            for name in touched:
                if name in self._indices:
                    self._indices[name].refresh()
        errors = any("error" in next(iter(item.values())) for item in items)
        took = int((time.perf_counter() - started) * 1000)
        return 200, {"took": took, "errors": errors, "items": items}

    def _bulk_index(
        self, name: str, doc_id: str | None, source: dict[str, Any], *, create: bool
    ) -> dict[str, Any]:
        if name not in self._indices:
            try:
                self._create(name, {}, check=True)
            except _OSError as exc:
                return {
                    "_index": name,
                    "_id": doc_id,
                    "status": exc.status,
                    "error": exc.body()["error"]["root_cause"][0],
                }
        index = self._indices[name]
        doc_id = doc_id if doc_id is not None else uuid.uuid4().hex[:20]
        if create and doc_id in index.docs:
            return _item_error(
                index,
                doc_id,
                _OSError(
                    409,
                    "version_conflict_engine_exception",
                    f"[{doc_id}]: version conflict, document already exists (current version "
                    f"[{index.versions[doc_id]}])",
                ),
            )
        trial = json.loads(json.dumps(index.mappings))
        try:
            _map_document(trial, source, doc_id)
        except _OSError as exc:
            return _item_error(index, doc_id, exc)
        index.mappings = trial
        existed = doc_id in index.docs
        index.docs[doc_id] = source
        index.versions[doc_id] = index.versions.get(doc_id, 0) + 1
        index.seq_no += 1
        return {
            "_index": name,
            "_id": doc_id,
            "_version": index.versions[doc_id],
            "result": "updated" if existed else "created",
            "_shards": {"total": 2, "successful": 1, "failed": 0},
            "_seq_no": index.seq_no,
            "_primary_term": 1,
            "status": 200 if existed else 201,
        }

    def _bulk_delete(self, name: str, doc_id: str | None) -> dict[str, Any]:
        index = self._indices.get(name)
        if index is None:
            error = _index_not_found(name)
            return {
                "_index": name,
                "_id": doc_id,
                "status": 404,
                "error": error.body()["error"]["root_cause"][0],
            }
        return self._remove(index, str(doc_id))[1]

    def _remove(self, index: _Index, doc_id: str) -> tuple[int, dict[str, Any]]:
        found = index.docs.pop(doc_id, None) is not None
        index.seq_no += 1
        version = index.versions.get(doc_id, 0) + 1
        if found:
            index.versions[doc_id] = version
        return (200 if found else 404), {
            "_index": index.name,
            "_id": doc_id,
            "_version": version,
            "result": "deleted" if found else "not_found",
            "_shards": {"total": 2, "successful": 1, "failed": 0},
            "_seq_no": index.seq_no,
            "_primary_term": 1,
            "status": 200 if found else 404,
        }

    def _delete(self, index: _Index, doc_id: str, params: dict[str, str]) -> tuple[int, Any]:
        status, reply = self._remove(index, doc_id)
        reply.pop("status")
        if params.get("refresh") in ("", "true", "wait_for"):
            index.refresh()
        return status, reply

    def _delete_by_query(self, index: _Index, body: Any, params: dict[str, str]) -> tuple[int, Any]:
        started = time.perf_counter()
        if not isinstance(body, dict) or "query" not in body:
            raise _OSError(
                400,
                "action_request_validation_exception",
                "Validation Failed: 1: query is missing;",
            )
        check = _compile(body["query"], index)
        # like a cluster, it deletes what a search finds: the refreshed documents
        doomed = [i for i, s in index.visible.items() if check(i, s) and i in index.docs]
        for doc_id in doomed:
            self._remove(index, doc_id)
        if params.get("refresh") in ("", "true"):
            index.refresh()
        return 200, {
            "took": int((time.perf_counter() - started) * 1000),
            "timed_out": False,
            "total": len(doomed),
            "deleted": len(doomed),
            "batches": 1 if doomed else 0,
            "version_conflicts": 0,
            "noops": 0,
            "retries": {"bulk": 0, "search": 0},
            "throttled_millis": 0,
            "requests_per_second": -1.0,
            "throttled_until_millis": 0,
            "failures": [],
        }

    # ------------------------------------------------------------------ search
    def _search(self, index: _Index, body: dict[str, Any]) -> tuple[int, Any]:
        started = time.perf_counter()
        unknown = set(body) - {"query", "size", "from", "_source", "track_total_hits"}
        if unknown:
            raise _OSError(
                400,
                "parsing_exception",
                f"Unknown key for a START_OBJECT in [{sorted(unknown)[0]}].",
            )
        size = body.get("size", 10)
        offset = body.get("from", 0)
        if not isinstance(size, int) or size < 0 or not isinstance(offset, int) or offset < 0:
            raise _OSError(400, "illegal_argument_exception", "[size] and [from] must be >= 0")
        if offset + size > 10000:
            raise _OSError(
                400,
                "illegal_argument_exception",
                "Result window is too large, from + size must be less than or equal to: [10000]",
            )
        query = body.get("query", {"match_all": {}})
        kind, spec = _one(query, "query")
        scored: list[tuple[str, float]]
        if kind == "knn":
            scored = self._knn(index, spec)
        else:
            check = _compile(query, index)
            scored = [(i, 1.0) for i, s in index.visible.items() if check(i, s)]
        window = scored[offset : offset + size]
        hits = [
            {
                "_index": index.name,
                "_id": doc_id,
                "_score": score,
                **(
                    {"_source": source}
                    if (source := _select_source(index.visible[doc_id], body.get("_source")))
                    is not None
                    else {}
                ),
            }
            for doc_id, score in window
        ]
        return 200, {
            "took": int((time.perf_counter() - started) * 1000),
            "timed_out": False,
            "_shards": {**_shards(), "skipped": 0},
            "hits": {
                "total": {"value": len(scored), "relation": "eq"},
                "max_score": max((s for _, s in scored), default=None),
                "hits": hits,
            },
        }

    def _knn(self, index: _Index, spec: Any) -> list[tuple[str, float]]:
        path, args = _one(spec, "knn")
        field_spec = _field_type(index.mappings, path)
        if field_spec is None or field_spec.get("type") != "knn_vector":
            raise _OSError(400, "query_shard_exception", f"Field '{path}' is not knn_vector type.")
        if not isinstance(args, dict):
            raise _OSError(400, "parsing_exception", "[knn] malformed query")
        unknown = set(args) - {"vector", "k", "filter", "boost", "method_parameters"}
        if unknown:
            raise _OSError(
                400,
                "parsing_exception",
                f"[knn] unknown token [{sorted(unknown)[0]}] after [{path}]",
            )
        vector = args.get("vector")
        k = args.get("k")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 10000:
            raise _OSError(
                400, "illegal_argument_exception", "[knn] requires k to be in the range (0, 10000]"
            )
        if not isinstance(vector, list) or not vector:
            raise _OSError(400, "illegal_argument_exception", "[knn] requires query vector")
        if len(vector) != field_spec["dimension"]:
            raise _OSError(
                400,
                "illegal_argument_exception",
                f"Query vector has invalid dimension: {len(vector)}. "
                f"Dimension should be: {field_spec['dimension']}",
            )
        space = _space(field_spec)
        query = np.asarray(vector, dtype=np.float32)
        if space == "cosinesimil" and not query.any():
            raise _OSError(
                400,
                "illegal_argument_exception",
                "zero vector is not supported when space type is [cosinesimil]",
            )
        ids, matrix = index.matrix(path)
        if not ids:
            return []
        if "filter" in args:
            check = _compile(args["filter"], index)
            keep = [n for n, doc_id in enumerate(ids) if check(doc_id, index.visible[doc_id])]
            ids = [ids[n] for n in keep]
            matrix = matrix[keep]
            if not ids:
                return []
        scores = _knn_scores(space, matrix, query)
        top = min(k, len(ids))
        order = np.argsort(-scores, kind="stable")[:top]
        return [(ids[n], float(np.float32(scores[n]))) for n in order]


def _item_error(index: _Index, doc_id: str, exc: _OSError) -> dict[str, Any]:
    cause = exc.body()["error"]["root_cause"][0]
    cause.setdefault("index", index.name)
    cause.setdefault("index_uuid", index.uuid)
    cause.setdefault("shard", "0")
    return {"_index": index.name, "_id": doc_id, "status": exc.status, "error": cause}


def _shards() -> dict[str, int]:
    return {"total": 1, "successful": 1, "failed": 0}


def iter_ndjson(text: str) -> Iterator[Any]:
    """Parse an NDJSON body (for tests that inspect a recorded ``_bulk`` call)."""
    for line in text.splitlines():
        if line.strip():
            yield json.loads(line)
