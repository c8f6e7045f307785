"""A dependant for supervisor tests: reads a URL from argv (or, with --from-file, the first
`http://…` in that file), GETs it, prints "ready: <url>" when it answers 200, then stays up."""

import re
import sys
import time
import urllib.request


def main() -> int:
    url = sys.argv[-1]
    if sys.argv[1] == "--from-file":
        with open(url, encoding="utf-8") as handle:
            url = re.search(r"http://[^\s'\"]+", handle.read()).group(0)
    with urllib.request.urlopen(url, timeout=5) as answer:
        if answer.status != 200:
            return 1
    print(f"ready: {url}", flush=True)
    time.sleep(600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
