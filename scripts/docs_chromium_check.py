"""Checks the DOM Swagger UI rendered at /docs/ (scripts/docs_chromium.sh) against the API
document it read: every (path, method) of /openapi.json has its operation block, and no
other block is there; the document's title is shown and no load error is.

Usage: python3 scripts/docs_chromium_check.py OPENAPI_JSON DOM_HTML
"""

import json
import sys
from html.parser import HTMLParser

METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


class Blocks(HTMLParser):
    """Collects the operation blocks: each `div.opblock.opblock-METHOD` and the `data-path`
    of the summary inside it."""

    def __init__(self):
        super().__init__()
        self.method = None
        self.found = []
        self.text = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "div" and "opblock" in classes:
            for c in classes:
                if c.startswith("opblock-") and c[len("opblock-"):] in METHODS:
                    self.method = c[len("opblock-"):]
        if "opblock-summary-path" in classes and a.get("data-path") is not None and self.method:
            self.found.append((a["data-path"], self.method))
            self.method = None

    def handle_data(self, data):
        self.text.append(data)


def main():
    with open(sys.argv[1]) as f:
        doc = json.load(f)
    with open(sys.argv[2]) as f:
        dom = f.read()
    want = sorted((p, m) for p, ops in doc["paths"].items() for m in ops if m in METHODS)
    parser = Blocks()
    parser.feed(dom)
    got = sorted(parser.found)
    text = " ".join(parser.text)
    failures = []
    if got != want:
        missing = [f"{m.upper()} {p}" for p, m in want if (p, m) not in got]
        extra = [f"{m.upper()} {p}" for p, m in got if (p, m) not in want]
        failures.append(f"operation blocks differ from /openapi.json: missing {missing}, extra {extra}")
    title = doc["info"]["title"]
    if title not in text:
        failures.append(f"the title {title!r} is not on the page")
    if "Failed to load API definition" in text or "Fetch error" in text:
        failures.append("the page shows a load error")
    if failures:
        for f in failures:
            print(f"FAIL: {f}", file=sys.stderr)
        print(f"(DOM: {len(dom)} bytes, {len(got)} operation blocks)", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {len(got)} operation blocks, one for each operation of /openapi.json: "
          + ", ".join(f"{m.upper()} {p}" for p, m in got))


if __name__ == "__main__":
    main()
