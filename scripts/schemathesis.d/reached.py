"""Reads the HAR file of a schemathesis run and the OpenAPI document, and says which operations
answered their success status (their lowest documented 2xx or 3xx) at least once.

Usage: reached.py OPENAPI.json RUN.har   (exits 1 when an operation never succeeded)
"""

import json
import re
import sys
import urllib.parse

METHODS = ("get", "put", "post", "delete", "options", "head", "patch")


def main():
    document = json.load(open(sys.argv[1]))
    entries = json.load(open(sys.argv[2]))["log"]["entries"]
    operations = []
    for path, item in document["paths"].items():
        pattern = re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path)) + "$")
        for method in METHODS:
            if method in item:
                codes = sorted(
                    int(code) for code in item[method]["responses"] if code.isdigit() and 200 <= int(code) < 400
                )
                operations.append((method.upper(), path, pattern, codes[0] if codes else None))
    seen = {}
    for entry in entries:
        method = entry["request"]["method"]
        path = urllib.parse.urlsplit(entry["request"]["url"]).path
        status = entry["response"]["status"]
        for op_method, op_path, pattern, _ in operations:
            if op_method == method and pattern.match(path):
                seen.setdefault((op_method, op_path), set()).add(status)
    # A literal path wins over a template that also matches (/v1/keys/self, /v1/keys/{id}).
    missing = []
    for method, path, _, success in operations:
        statuses = seen.get((method, path), set())
        if success is None or success not in statuses:
            missing.append(f"{method} {path} (wanted {success}, got {sorted(statuses)})")
    print(f"operations answering their success status: {len(operations) - len(missing)}/{len(operations)}")
    for line in missing:
        print(f"  never: {line}")
    print(f"requests in the HAR file: {len(entries)}")
    sys.exit(1 if missing else 0)


if __name__ == "__main__":
    main()
