"""A load-balancer backend for the namespace tests: answers every GET with its own name, over
HTTP/1.1 keep-alive (so a client can ask twice on one TCP connection).

Usage: python3 lb_backend.py NAME PORT
"""
import http.server
import sys

NAME, PORT = sys.argv[1], int(sys.argv[2])


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = NAME.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("0.0.0.0", PORT), Handler).serve_forever()
