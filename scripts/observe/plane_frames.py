"""Print the TCP request plane's frames in a loopback capture (tcpdump -i lo -s 0 -w FILE):
each request frame (endpoint path, headers, control message, body) sent to one of the worker
ports given, and each call-back stream's frames (handshake, prologue, data items, sentinel),
bodies decoded as JSON or msgpack. Needs msgspec (the Dynamo venv has it). Used by disagg.sh.

Usage: python plane_frames.py FILE WORKER_PORT...
"""
import json
import os
import struct
import sys

import msgspec

sys.path.insert(0, os.path.dirname(__file__))
from pcap_conns import packets  # noqa: E402  (runs its main() only when run as a script)


def body(b):
    if not b:
        return None
    if b[:1] in (b"{", b"[", b'"'):
        try:
            return json.loads(b)
        except ValueError:
            pass
    try:
        return msgspec.msgpack.decode(b)
    except msgspec.DecodeError:
        return {"<undecoded>": b[:64].hex()}


def two_part(b, off):
    if len(b) - off < 24:
        return None
    hl, bl, _ = struct.unpack(">QQQ", b[off:off + 24])
    if len(b) - off < 24 + hl + bl:
        return None
    return b[off + 24:off + 24 + hl], b[off + 24 + hl:off + 24 + hl + bl], off + 24 + hl + bl


def show(o):
    return json.dumps(o, ensure_ascii=False, default=lambda x: x.hex() if isinstance(x, bytes) else str(x))


def main():
    path, ports = sys.argv[1], {int(p) for p in sys.argv[2:]}
    conns, order = {}, []
    for sport, dport, flags, payload, _ in packets(path):
        if flags & 0x02 and not flags & 0x10:
            if (sport, dport) not in conns:
                conns[(sport, dport)] = [b"", b""]
                order.append((sport, dport))
            continue
        if (sport, dport) in conns:
            conns[(sport, dport)][0] += payload
        elif (dport, sport) in conns:
            conns[(dport, sport)][1] += payload
    for key in order:
        c, s = conns[key]
        if key[1] in ports:  # requests to a worker
            off = 0
            while off + 2 <= len(c):
                n = struct.unpack(">H", c[off:off + 2])[0]
                p = c[off + 2:off + 2 + n].decode(errors="replace")
                off += 2 + n
                hn = struct.unpack(">H", c[off:off + 2])[0]
                headers = c[off + 2:off + 2 + hn].decode(errors="replace")
                off += 2 + hn
                pn = struct.unpack(">I", c[off:off + 4])[0]
                parts = two_part(c[off + 4:off + 4 + pn], 0)
                off += 4 + pn
                print(f"REQUEST :{key[0]} -> :{key[1]} path={p} headers={headers}")
                if parts:
                    print(f"  control: {parts[0].decode(errors='replace')}")
                    print(f"  body: {show(body(parts[1]))}")
        elif c.startswith(b"\0\0\0\0\0\0\0"):  # a call-back stream (two-part frames)
            off, frames = 0, []
            while True:
                parts = two_part(c, off)
                if not parts:
                    break
                h, d, off = parts
                frames.append(show(body(h)) if h else show(body(d)))
            if frames:
                print(f"CALLBACK :{key[0]} -> :{key[1]} ({len(frames)} frames)")
                for f in frames:
                    print(f"  {f[:1500]}")


if __name__ == "__main__":
    main()
