"""A small HTTP server for supervisor tests: binds 127.0.0.1:PORT at once, answers 503 until
--delay seconds have passed, then 200. Prints "listening on PORT" and, when ready, "ready at <epoch>"."""

import argparse
import http.server
import sys
import threading
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    start = time.monotonic()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            ready = time.monotonic() - start >= args.delay
            self.send_response(200 if ready else 503)
            self.end_headers()
            self.wfile.write(b"ok" if ready else b"warming up")

        def log_message(self, *_):
            pass

    try:
        server = http.server.HTTPServer(("127.0.0.1", args.port), Handler)
    except OSError as exc:
        print(f"cannot bind 127.0.0.1:{args.port}: {exc}", flush=True)
        return 1
    print(f"listening on {args.port}", flush=True)

    ready_at = time.time() + max(0.0, args.delay - (time.monotonic() - start))

    def announce():
        time.sleep(max(0.0, ready_at - time.time()))
        print(f"ready at {ready_at:.6f}", flush=True)  # when GET starts answering 200 (the bench reads it)

    threading.Thread(target=announce, daemon=True).start()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
