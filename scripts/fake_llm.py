"""A scripted model provider for checking the Hermes plugin in a real Hermes Agent: an OpenAI-compatible
/v1/chat/completions server on 127.0.0.1 (the only part that stands in for anything: the model).

It plays an agent that starts a run and then waits to be told: a user message asking to train gets a
rl_start_training call; a tool result gets a short text answer; a user message holding a run notice
gets an answer quoting it. Every request is appended to --log as one JSON line: the messages' roles
and texts, the tool calls asked for, and the size of the rl_* tool schemas as Hermes sent them.

    python scripts/fake_llm.py --port-file /tmp/port --log /tmp/requests.jsonl
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

NOTICE_MARK = "[hermes-rl] Run "


def _text(content) -> str:
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def reply_to(messages: list[dict], tools: list[dict]) -> dict:
    """The scripted assistant message for a conversation; a request without tools (Hermes' own side
    calls, e.g. a session title) gets a plain answer."""
    last = messages[-1] if messages else {}
    text = _text(last.get("content"))
    if not tools:
        return {"role": "assistant", "content": "RL training"}
    if last.get("role") == "tool":
        return {"role": "assistant", "content": "The run is started; I will tell you when it ends."}
    if NOTICE_MARK in text:
        notice = text[text.index(NOTICE_MARK) :].splitlines()[0]
        return {"role": "assistant", "content": f"NOTICE RECEIVED: {notice}"}
    if "train" in text.lower():
        call = {"id": f"call_{int(time.time() * 1000)}", "type": "function"}
        call["function"] = {"name": "rl_start_training", "arguments": "{}"}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"role": "assistant", "content": "OK."}


def serve(log_path: Path, port_file: Path) -> None:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _json(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path.rstrip("/").endswith("/models"):
                self._json(200, {"object": "list", "data": [{"id": "fake-agent", "object": "model"}]})
            else:
                self._json(404, {"error": {"message": "not found"}})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if not self.path.endswith("/chat/completions"):
                self._json(404, {"error": {"message": "not found"}})
                return
            messages = body.get("messages") or []
            rl_tools = [t for t in body.get("tools") or [] if t.get("function", {}).get("name", "").startswith("rl_")]
            message = reply_to(messages, rl_tools)
            with lock, log_path.open("a", encoding="utf-8") as log:
                record = {
                    "time": time.time(),
                    "messages": [{"role": m.get("role"), "text": _text(m.get("content"))[:4000]} for m in messages],
                    "rl_tools": len(rl_tools),
                    "rl_tools_chars": len(json.dumps(rl_tools)),
                    "reply": message,
                }
                log.write(json.dumps(record) + "\n")
            finish = "tool_calls" if message.get("tool_calls") else "stop"
            if body.get("stream"):
                self._stream(body.get("model", "fake-agent"), message, finish)
            else:
                choice = {"index": 0, "message": message, "finish_reason": finish}
                self._json(200, {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
                                 "model": body.get("model", "fake-agent"), "choices": [choice],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})  # fmt: skip

        def _stream(self, model: str, message: dict, finish: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            delta = {"role": "assistant", "content": message.get("content")}
            if message.get("tool_calls"):
                delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
            base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time())}
            base["model"] = model
            chunks = [
                {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                {**base, "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
            ]
            for chunk in chunks:
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    port_file.write_text(str(server.server_address[1]))
    server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--port-file", type=Path, required=True)
    args = parser.parse_args()
    serve(args.log, args.port_file)


if __name__ == "__main__":
    main()
