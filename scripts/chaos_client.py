"""Clients of scripts/chaos.sh (standard library only): raw HTTP/1.1 requests to a frontend,
so a test can leave at any point of an answer and read every byte of what came.

  streams  PORT N MAX_TOKENS MODE   N streamed chats and one whole one, concurrently; MODE
                                    `complete`: every answer complete and well formed
                                    (finish_reason, usage, [DONE], no error event);
                                    `clean`: each complete or ended by the 503 error event and
                                    [DONE], at least one of them so (a worker died under it).
  leave    PORT N SEED              N clients that go away at random points (before the first
                                    token, mid-stream, during a whole answer) or stay; prints
                                    how many left.
  overload PORT N [SPACING]         N streamed chats at once (SPACING s apart, default 0.02)
                                    against a busy threshold: each is served whole or refused
                                    with 1.6.1's 529 body and Retry-After; prints `served refused`.
  ok       PORT N                   N short chats, 8 at a time; every one must be 200.
  metric   PORT NAME                the sum of every sample of family NAME in /metrics.
"""
import json
import random
import socket
import sys
import threading
import time

MODEL = "qwen3"
DONE = b"data: [DONE]\n\n"
UNAVAILABLE = (
    b'data: {"error":{"message":"Service temporarily unavailable","type":"service_unavailable","code":503}}\n\n'
)


def send(port, body, headers=b""):
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    data = json.dumps(body).encode()
    s.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n" + headers
        + b"content-length: " + str(len(data)).encode() + b"\r\n\r\n" + data
    )
    return s


def run_all(run, args, spacing=0.0):
    """run(*a) for each a in args, each on its own thread (started `spacing` s apart); waits
    for all of them."""
    threads = [threading.Thread(target=run, args=a) for a in args]
    for t in threads:
        t.start()
        if spacing:
            time.sleep(spacing)
    for t in threads:
        t.join()


def fail_if(errors, shown=None):
    if errors:
        sys.exit("FAIL: " + "; ".join(errors[:shown]))


def read_head(f):
    status = f.readline().decode()
    headers = {}
    while True:
        line = f.readline()
        if line in (b"\r\n", b""):
            break
        k, _, v = line.decode().partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(status.split()[1]), headers


def read_body(f, headers):
    if headers.get("transfer-encoding") == "chunked":
        out = b""
        while True:
            size = f.readline()
            if not size:
                raise RuntimeError("connection closed inside a chunked body: %r" % out[-300:])
            n = int(size.strip(), 16)
            chunk = f.read(n + 2)
            if n == 0:
                return out
            out += chunk[:n]
    return f.read(int(headers.get("content-length", "0")))


def chat(max_tokens, stream, prompt="Tell me a long story about ships"):
    body = {"model": MODEL, "max_tokens": max_tokens, "ignore_eos": True,
            "messages": [{"role": "user", "content": prompt}]}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def exchange(port, body, headers=b""):
    """One request on a new connection: (status, headers, body) of its answer."""
    s = send(port, body, headers)
    f = s.makefile("rb")
    status, head = read_head(f)
    answer = read_body(f, head)
    s.close()
    return status, head, answer


def one(port, max_tokens, stream):
    status, _, body = exchange(port, chat(max_tokens, stream))
    return status, body


def check_stream(body, max_tokens, mode):
    """'complete', 'error', or raises."""
    if not body.endswith(DONE):
        raise AssertionError("no [DONE] at the end: %r" % body[-300:])
    events = [e for e in body.split(b"\n\n") if e]
    if body.endswith(UNAVAILABLE + DONE):
        if mode == "complete":
            raise AssertionError("an error event in a migrated stream: %r" % body[-300:])
        return "error"
    if b'"error"' in body:
        raise AssertionError("an unexpected error event: %r" % body[-400:])
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    finish = [c["choices"][0].get("finish_reason") for c in chunks if c.get("choices")]
    if "length" not in finish:
        raise AssertionError("no finish_reason: %r" % body[-300:])
    usage = chunks[-1].get("usage") or {}
    if usage.get("completion_tokens") != max_tokens:
        raise AssertionError("completion_tokens %r, not %d" % (usage, max_tokens))
    return "complete"


def streams(port, n, max_tokens, mode):
    results, errors = {}, []

    def run(i, stream):
        try:
            status, body = one(port, max_tokens, stream)
            if stream:
                if status != 200:
                    raise AssertionError("status %d: %r" % (status, body[:300]))
                results[i] = check_stream(body, max_tokens, mode)
            elif status == 200:
                usage = json.loads(body)["usage"]
                if usage["completion_tokens"] != max_tokens:
                    raise AssertionError("whole answer: completion_tokens %r" % usage)
                results[i] = "complete"
            elif status == 503 and mode == "clean":
                results[i] = "error"
            else:
                raise AssertionError("whole answer: status %d: %r" % (status, body[:300]))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append("request %d: %s" % (i, e))

    run_all(run, [(i, i < n) for i in range(n + 1)])
    fail_if(errors)
    errored = sum(1 for r in results.values() if r == "error")
    if mode == "clean" and errored == 0:
        sys.exit("FAIL: no answer ended with an error: was a worker killed under one?")
    print("  %d answers: %d complete, %d ended with a clean error" % (len(results), len(results) - errored, errored))


def leave(port, n, seed):
    rng = random.Random(seed)
    plans = []
    for i in range(n):
        kind = rng.choice(["before_first", "mid_stream", "whole", "whole", "stay"])
        plans.append((kind, rng.uniform(0.02, 0.6), rng.randint(1, 20)))
    left = [0]
    lock = threading.Lock()
    errors = []

    def run(plan):
        kind, delay, chunks = plan
        try:
            stream = kind in ("before_first", "mid_stream")
            s = send(port, chat(200 if kind != "stay" else 8, stream))
            if kind == "stay":
                f = s.makefile("rb")
                status, headers = read_head(f)
                read_body(f, headers)
                if status != 200:
                    raise AssertionError("a staying client got %d" % status)
            elif kind == "mid_stream":
                f = s.makefile("rb")
                status, _ = read_head(f)
                for _ in range(chunks):
                    f.readline()
                s.close()
            else:
                time.sleep(delay if kind == "whole" else delay / 10)
                s.close()
            if kind != "stay":
                with lock:
                    left[0] += 1
        except Exception as e:  # noqa: BLE001
            errors.append("%s: %s" % (kind, e))

    run_all(run, [(p,) for p in plans])
    fail_if(errors)
    print(left[0])


OVERLOADED = {"message": "Service temporarily overloaded", "type": "Overloaded", "code": 529}


def overload(port, n, spacing=0.02):
    served, refused, errors = [0], [0], []
    lock = threading.Lock()

    def run(i):
        try:
            status, headers, body = exchange(port, chat(60, True, "Request %d: " % i + "tell me about ships " * 40))
            if status == 200:
                check_stream(body, 60, "complete")
                with lock:
                    served[0] += 1
            elif status == 529:
                if json.loads(body) != OVERLOADED or headers.get("retry-after") != "1":
                    raise AssertionError("529 %r %r" % (headers, body))
                with lock:
                    refused[0] += 1
            else:
                raise AssertionError("status %d: %r" % (status, body[:300]))
        except Exception as e:  # noqa: BLE001
            errors.append("request %d: %s" % (i, e))

    run_all(run, [(i,) for i in range(n)], spacing=spacing)
    fail_if(errors, 5)
    print(served[0], refused[0])


def ok(port, n):
    errors = []
    sem = threading.Semaphore(8)

    def run(i):
        with sem:
            status, _, body = exchange(port, chat(4, False, "Request %d: tell me about ships" % i))
            if status != 200:
                errors.append("%d %r" % (status, body[:200]))

    run_all(run, [(i,) for i in range(n)])
    if errors:
        sys.exit("FAIL: %d of %d requests failed: %s" % (len(errors), n, errors[:3]))
    print("  %d requests: all 200" % n)


def session(port, name, n):
    """n requests one after another, each on a new connection, naming session `name`."""
    for i in range(n):
        session_header = b"x-dynamo-session-id: " + name.encode() + b"\r\n"
        status, _, body = exchange(port, chat(4, False, "Session request %d" % i), session_header)
        if status != 200:
            sys.exit("FAIL: session %s request %d: %d %r" % (name, i, status, body[:200]))


def metric(port, name):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
    f = s.makefile("rb")
    _, headers = read_head(f)
    text = read_body(f, headers).decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    print(int(total))


if __name__ == "__main__":
    cmd, port = sys.argv[1], int(sys.argv[2])
    if cmd == "streams":
        streams(port, int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    elif cmd == "leave":
        leave(port, int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "overload":
        overload(port, int(sys.argv[3]), float(sys.argv[4]) if len(sys.argv) > 4 else 0.02)
    elif cmd == "ok":
        ok(port, int(sys.argv[3]))
    elif cmd == "session":
        session(port, sys.argv[3], int(sys.argv[4]))
    elif cmd == "metric":
        metric(port, sys.argv[3])
    else:
        sys.exit(__doc__)
