"""Read a folder of text files as documents."""

from __future__ import annotations

import os
from pathlib import Path

from daimon.core.documents import Document
from daimon.core.errors import KnowledgeBaseError

__all__ = ("read_documents",)


def read_documents(
    folder: str | os.PathLike[str], pattern: str = "**/*.md", *, encoding: str = "utf-8"
) -> list[Document]:
    """Every file under ``folder`` matching ``pattern``, as documents, in path order.

    A document's id and its ``source`` metadata are the file's path relative to ``folder``
    (with ``/``), so ingesting the folder again replaces each file's chunks.

    Raises:
        KnowledgeBaseError: The folder does not exist, or a file is not valid text.
    """
    root = Path(folder)
    if not root.is_dir():
        raise KnowledgeBaseError(f"not a folder: {os.fspath(folder)!r}")
    documents = []
    for path in sorted(p for p in root.glob(pattern) if p.is_file()):
        relative = path.relative_to(root).as_posix()
        try:
            text = path.read_text(encoding=encoding)
        except (UnicodeDecodeError, OSError) as exc:
            raise KnowledgeBaseError(
                f"cannot read {relative!r} as {encoding} text: {exc}"
            ) from None
        documents.append(Document(content=text, id=relative, metadata={"source": relative}))
    return documents
