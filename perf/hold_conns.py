"""Open N connections to 127.0.0.1:PORT and hold them until a line arrives on stdin.

Usage: hold_conns.py PORT N fresh|used
  fresh  connect only (the server waits for a first byte)
  used   send one `GET /live` on each and read its answer, then stay silent
Prints `open N` once every connection is open (and answered), then, after the stdin line,
`closed K`: K of them the server had already closed. Used by perf/idle_conns.sh and
perf/crowd.sh.
"""

import socket
import sys

port, n, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
req = b"GET /live HTTP/1.1\r\nHost: x\r\n\r\n"
socks = []
for i in range(0, n, 500):
    batch = [socket.create_connection(("127.0.0.1", port)) for _ in range(min(500, n - i))]
    if mode == "used":
        for s in batch:
            s.sendall(req)
        for s in batch:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    sys.exit("connection closed before the answer")
                data += chunk
    socks += batch
print("open", len(socks), flush=True)
sys.stdin.readline()
closed = 0
for s in socks:
    s.setblocking(False)
    try:
        if s.recv(1) == b"":
            closed += 1
    except BlockingIOError:
        pass
    s.close()
print("closed", closed, flush=True)
