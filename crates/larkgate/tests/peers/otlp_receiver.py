"""An OTLP/HTTP trace receiver for larkgate's trace tests: what a collector would receive,
decoded with OpenTelemetry's official protobuf definitions (`opentelemetry-proto`).

Usage: python otlp_receiver.py

Binds 127.0.0.1 on a free port and prints the port on one line. Each `POST /v1/traces`
(protobuf `ExportTraceServiceRequest`) is answered 200 with an empty
`ExportTraceServiceResponse`, and each span in it is printed as one JSON line:
{"name", "trace_id", "span_id", "parent_span_id", "kind", "service", "attributes"}, ids in
lowercase hex. Anything else is answered 404; a body that does not decode, 400.
"""

import json
import socket
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        if self.path != "/v1/traces" or self.headers.get("content-type") != "application/x-protobuf":
            self.send_error(404)
            return
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except DecodeError:
            self.send_error(400)
            return
        for resource_spans in request.resource_spans:
            resource = {a.key: value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    line = {
                        "name": span.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "kind": span.kind,
                        "service": resource.get("service.name"),
                        "attributes": {a.key: value(a.value) for a in span.attributes},
                    }
                    print(json.dumps(line), flush=True)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def main():
    server = HTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
