"""A stand-in for one `vllm serve` process, for the router and scrape tests: standard library only.

It answers what vLLM's OpenAI server answers that a router or Prometheus asks for: `/health`,
`/v1/models`, chat completions with and without streaming (server-sent events ending in
`data: [DONE]`), `/v1/embeddings`, and `/metrics` in Prometheus text with vLLM 0.20's metric
names (views.exports.metric_names). Every request served is counted in `vllm:request_success_total`, so a
test can read which replica served what from the outside.

    python tests/fake_vllm.py --port 8000 --served-model-name bge-m3 --replica bge-m3-1
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from views.exports.metric_names import VLLM


class _State:
    def __init__(self, model: str, replica: str) -> None:
        self.model, self.replica = model, replica
        self.lock = threading.Lock()
        self.served = 0
        self.running = 0

    def metrics(self) -> str:
        labels = f'engine="0",model_name="{self.model}"'
        with self.lock:
            served, running = self.served, self.running
        return "".join(
            [
                f"# HELP {VLLM.running} Number of requests in model execution batches.\n",
                f"# TYPE {VLLM.running} gauge\n{VLLM.running}{{{labels}}} {running}.0\n",
                f"# HELP {VLLM.waiting} Number of requests waiting to be processed.\n",
                f"# TYPE {VLLM.waiting} gauge\n{VLLM.waiting}{{{labels}}} 0.0\n",
                f"# HELP {VLLM.kv_cache_usage} KV-cache usage. 1 means 100 percent usage.\n",
                f"# TYPE {VLLM.kv_cache_usage} gauge\n{VLLM.kv_cache_usage}{{{labels}}} 0.1\n",
                "# HELP vllm:request_success_total Count of successfully processed requests.\n",
                "# TYPE vllm:request_success_total counter\n",
                f'vllm:request_success_total{{{labels},finished_reason="stop"}} {served}.0\n',
                f"# HELP {VLLM.generation_tokens} Number of generation tokens processed.\n",
                f"# TYPE {VLLM.generation_tokens} counter\n{VLLM.generation_tokens}{{{labels}}} {served}.0\n",
            ]
        )


def _handler(state: _State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet: the tests read the counters
            pass

        def _json(self, body: object, status: int = 200) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/health":
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif self.path == "/v1/models":
                self._json({"object": "list", "data": [{"id": state.model, "object": "model", "owned_by": "vllm"}]})
            elif self.path == "/metrics":
                data = state.metrics().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self._json({"error": {"message": f"no route {self.path}"}}, 404)

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            request = json.loads(self.rfile.read(length) or b"{}")
            with state.lock:
                state.served += 1
            if self.path == "/v1/embeddings":
                self._json(
                    {
                        "object": "list",
                        "model": state.model,
                        "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2, 0.3]}],
                        "usage": {"prompt_tokens": 3, "total_tokens": 3},
                    }
                )
            elif self.path == "/v1/chat/completions":
                self._chat(request)
            else:
                self._json({"error": {"message": f"no route {self.path}"}}, 404)

        def _chat(self, request: dict) -> None:
            created = int(time.time())
            ident = f"chatcmpl-{state.replica}-{created}"
            words = ["served", "by", state.replica]
            if not request.get("stream"):
                message = {"role": "assistant", "content": " ".join(words)}
                self._json(
                    {
                        "id": ident,
                        "object": "chat.completion",
                        "created": created,
                        "model": state.model,
                        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4},
                    }
                )
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for word in words:
                chunk = {
                    "id": ident,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": state.model,
                    "choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}],
                }
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", required=True)
    parser.add_argument("--replica", required=True)
    args = parser.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), _handler(_State(args.served_model_name, args.replica)))
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
