"""Time to ready and idle memory of one frontend start, with its workers already registered.

Starts the command given after `--`, then polls its HTTP port every millisecond: the time
until the port accepts a connection, and the time until `GET /v1/models` lists MODEL. Three
seconds later it reads the process's resident memory (VmRSS, all threads) and its peak
(VmHWM), sends SIGTERM and waits. Prints one JSON object. When the process's log (`--log`)
holds switchyard's "model files DIR: loaded in N ms" line, that time (reading and parsing the
model files: tokenizer, template) is reported as `model_load_ms`, so it can be told apart
from the rest of the start.

Usage: python3 perf/ready.py --port 18300 --model qwen3 --label switchyard -- switchyard --http-port 18300 ...
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time


def kb(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def models(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        return data


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--log", default=os.devnull)
    ap.add_argument("--label", default="", help="the frontend's name, copied into the output")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    log = open(a.log, "ab")
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=log, stderr=log)
    port_ms = ready_ms = None
    needle = f'"{a.model}"'.encode()
    try:
        while time.perf_counter() - t0 < a.timeout and p.poll() is None:
            try:
                body = models(a.port)
            except OSError:
                time.sleep(0.001)
                continue
            if port_ms is None:
                port_ms = (time.perf_counter() - t0) * 1000
            if needle in body:
                ready_ms = (time.perf_counter() - t0) * 1000
                break
            time.sleep(0.001)
        if ready_ms is None:
            print(json.dumps({"error": f"not ready within {a.timeout} s", "exit": p.poll()}))
            return 1
        time.sleep(3)
        out = {"row": "ready", "frontend": a.label, "port_ms": round(port_ms, 1), "ready_ms": round(ready_ms, 1),
               "idle_rss_mb": round(kb(p.pid, "VmRSS") / 1024, 1),
               "peak_rss_mb": round(kb(p.pid, "VmHWM") / 1024, 1)}
        if a.log != os.devnull:
            log.flush()
            with open(a.log, errors="replace") as f:
                found = re.findall(r"model files .*: loaded in ([0-9.]+) ms", f.read())
            if found:
                out["model_load_ms"] = float(found[-1])
        print(json.dumps(out))
        return 0
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


if __name__ == "__main__":
    sys.exit(main())
