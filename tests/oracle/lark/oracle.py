"""The oracle of tests/lark_test.cpp: Lark's own parser says which texts a grammar accepts.

Lark (Debian's python3-lark, 1.1.5) with parser="earley" and lexer="dynamic_complete", which
tries every length of every terminal at every position: the language of the grammar, as llmq's
Lark front end (engine/structured/lark.h) promises to enforce it.

Input (standard input): [{"grammar": TEXT, "texts": [TEXT, ...]}, ...]
Output (standard output): one entry per grammar: [bool, ...] (whether Lark parses each text
whole), or {"error": MESSAGE} when Lark refuses the grammar.
"""
import json
import sys

import lark


def main():
    out = []
    for case in json.load(sys.stdin):
        try:
            parser = lark.Lark(case["grammar"], parser="earley", lexer="dynamic_complete",
                               start="start")
        except Exception as e:  # noqa: BLE001 (a refusal of any kind is the answer)
            out.append({"error": str(e)})
            continue
        verdicts = []
        for text in case["texts"]:
            try:
                parser.parse(text)
                verdicts.append(True)
            except lark.exceptions.LarkError:
                verdicts.append(False)
        out.append(verdicts)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
