"""List the TCP connections of a loopback capture (tcpdump -i lo -s 0 -w FILE) and what each
side sent first: `tls` when the payload starts with a TLS handshake record (16 03 0x),
`plain` otherwise, with the first bytes in hex. Used by request_plane_tls.sh.

Usage: python3 pcap_conns.py FILE [PORT...]   (only connections touching one of the ports)
"""
import struct
import sys


def packets(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    off = 24
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        frame = data[off + 16:off + 16 + incl]
        off += 16 + incl
        if linktype == 1:  # Ethernet (tcpdump -i lo)
            if frame[12:14] != b"\x08\x00":
                continue
            ip = frame[14:]
        elif linktype == 113:  # Linux cooked
            ip = frame[16:]
        else:
            ip = frame
        if not ip or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        ihl = (ip[0] & 15) * 4
        tcp = ip[ihl:]
        sport, dport = struct.unpack(">HH", tcp[:4])
        flags = tcp[13]
        doff = (tcp[12] >> 4) * 4
        total = struct.unpack(">H", ip[2:4])[0]
        yield sport, dport, flags, tcp[doff:], total - ihl - doff


def main():
    path, ports = sys.argv[1], {int(p) for p in sys.argv[2:]}
    conns = {}  # (client port, server port) -> {"first": side, "c": bytes, "s": bytes}
    order = []
    for sport, dport, flags, payload, size in packets(path):
        if flags & 0x02 and not flags & 0x10:  # SYN: sport is the client
            key = (sport, dport)
            if key not in conns:
                conns[key] = {"c": b"", "s": b"", "first": None, "rst": False, "bytes": [0, 0]}
                order.append(key)
            continue
        if (sport, dport) in conns:
            key, side = (sport, dport), "c"
        elif (dport, sport) in conns:
            key, side = (dport, sport), "s"
        else:
            continue
        c = conns[key]
        if flags & 0x04:
            c["rst"] = True
        if payload:
            c["bytes"][0 if side == "c" else 1] += size
            if not c[side]:
                c[side] = payload
                c["first"] = c["first"] or side
    for key in order:
        if ports and not ({key[0], key[1]} & ports):
            continue
        c = conns[key]

        def kind(b):
            if not b:
                return "-"
            t = "tls" if len(b) >= 3 and b[0] in (0x14, 0x15, 0x16, 0x17) and b[1] == 3 else "plain"
            return f"{t}({b[:6].hex(' ')})"

        print(f"client :{key[0]} -> server :{key[1]}  first from {c['first'] or '-'}  "
              f"client sent {c['bytes'][0]} B {kind(c['c'])}  server sent {c['bytes'][1]} B {kind(c['s'])}"
              + ("  RST" if c["rst"] else "") + hello(c["c"]))


def hello(b):
    """SNI and ALPN of a ClientHello (the whole first record must be in the capture)."""
    if len(b) < 9 or b[0] != 0x16 or b[5] != 1:
        return ""
    try:
        p = 9 + 2 + 32  # record + handshake headers, version, random
        p += 1 + b[p]  # session id
        p += 2 + int.from_bytes(b[p:p + 2], "big")  # cipher suites
        p += 1 + b[p]  # compression
        end = p + 2 + int.from_bytes(b[p:p + 2], "big")
        p += 2
        sni, alpn = "none", "none"
        while p + 4 <= end:
            t, n = int.from_bytes(b[p:p + 2], "big"), int.from_bytes(b[p + 2:p + 4], "big")
            e = b[p + 4:p + 4 + n]
            if t == 0:
                sni = e[5:].decode(errors="replace")
            elif t == 16:
                names, q = [], 2
                while q < len(e):
                    names.append(e[q + 1:q + 1 + e[q]].decode(errors="replace"))
                    q += 1 + e[q]
                alpn = ",".join(names)
            p += 4 + n
        return f"  [ClientHello SNI={sni} ALPN={alpn}]"
    except IndexError:
        return "  [ClientHello cut short]"


if __name__ == "__main__":
    main()
