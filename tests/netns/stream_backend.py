"""A backend for long-lived connections (scripts/scale-out-demo.sh): answers each line a client
sends with its own name and the line, on as many connections as clients open, for as long as
they stay open. With NAME "-" it answers with the address the connection came from instead (a
server behind NATs: which outside address, so which NAT instance, carries it).

Usage: python3 stream_backend.py NAME PORT
"""
import socketserver
import sys

NAME, PORT = sys.argv[1].encode(), int(sys.argv[2])


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        name = self.client_address[0].encode() if NAME == b"-" else NAME
        for line in self.rfile:
            self.wfile.write(name + b" " + line)
            self.wfile.flush()


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


Server(("0.0.0.0", PORT), Handler).serve_forever()
