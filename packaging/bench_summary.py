"""Print the rows of ``dmlviewer bench ... --json`` outputs (one or more JSON documents in a
file, as packaging/gpu_check.sh appends them) as short lines."""

from __future__ import annotations

import json
import sys

KEYS = ("bare_forward_ms", "bare_forward_graph_ms", "prepare_ms", "prepare_graph_ms", "ratio", "ratio_graph",
        "ratio_graph_to_graphed_bare",
        "ratio_with_preprocessing", "pair_graph")


def documents(text: str):
    decoder, pos = json.JSONDecoder(), 0
    while text[pos:].strip():
        while text[pos].isspace():
            pos += 1
        doc, pos = decoder.raw_decode(text, pos)
        yield doc


def main(path: str) -> None:
    for doc in documents(open(path).read()):
        if "prepare" in doc:
            for row in doc["prepare"]:
                print("explain", row["model"], row["image"], *(f"{k}={row[k]}" for k in KEYS if k in row))
        else:
            print(doc.get("benchmark", "?"), {k: v for k, v in doc.items() if k != "machine"})


if __name__ == "__main__":
    for name in sys.argv[1:]:
        main(name)
