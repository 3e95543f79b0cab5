"""An HTTP endpoint that receives larkgate's audit checkpoints, as an operator's webhook would:
for the anchor tests.

Usage: python webhook_receiver.py DOWN_FILE

Binds 127.0.0.1 on a free port and prints the port on one line. Each `POST /checkpoints` is
answered 503 while the file DOWN_FILE exists (the endpoint is down), else 204, and printed as
one JSON line: {"status", "authorization", "content_type", "body"} (the body as text). Anything
else is answered 404.
"""

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path != "/checkpoints":
            self.send_error(404)
            return
        status = 503 if os.path.exists(sys.argv[1]) else 204
        line = {
            "status": status,
            "authorization": self.headers.get("authorization"),
            "content_type": self.headers.get("content-type"),
            "body": body.decode("utf-8"),
        }
        print(json.dumps(line), flush=True)
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
