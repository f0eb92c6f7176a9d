"""HTTPS checks with real clients against a running switchyard in front of a real worker.

Usage: interop_tls_client.py PORT MODEL CERTS_DIR http|grpc [--mtls]

`http` needs the openai SDK (the Dynamo venv), `grpc` needs tritonclient (its own venv).

CERTS_DIR holds ca.pem (the server's CA), and for --mtls client.pem/client.key (trusted) and
stranger.pem/stranger.key (signed by a CA the server does not trust).

Checks, over TLS only: Python's ssl module speaking HTTP/1.1 (ALPN http/1.1) with two
requests on one connection; ALPN offering h2 first is answered h2; the openai SDK (httpx,
verifying the server against the CA) for a whole and a streamed chat answer; the real
tritonclient over gRPC with TLS (server live, model metadata, a unary infer). With --mtls:
each of those with the trusted client certificate, and a client without a certificate or
with the stranger's is refused (no HTTP answer). Exits non-zero on the first failure.
"""

import json
import os
import socket
import ssl
import sys

PORT = int(sys.argv[1])
MODEL = sys.argv[2]
CERTS = sys.argv[3]
PART = sys.argv[4]
MTLS = "--mtls" in sys.argv[5:]
CA = os.path.join(CERTS, "ca.pem")
IDENTITY = (os.path.join(CERTS, "client.pem"), os.path.join(CERTS, "client.key")) if MTLS else None


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


def context(alpn, identity=IDENTITY):
    ctx = ssl.create_default_context(cafile=CA)
    ctx.set_alpn_protocols(alpn)
    if identity:
        ctx.load_cert_chain(*identity)
    return ctx


def http1_exchange(ctx, path, body=None):
    """Two requests on one TLS connection; returns (negotiated ALPN, TLS version, answers)."""
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", PORT), timeout=30), server_hostname="localhost")
    answers = []
    for _ in range(2):
        if body is None:
            s.sendall(f"GET {path} HTTP/1.1\r\nhost: localhost\r\n\r\n".encode())
        else:
            data = json.dumps(body).encode()
            s.sendall(f"POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n"
                      f"content-length: {len(data)}\r\n\r\n".encode() + data)
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += s.recv(65536)
        head, rest = buf.split(b"\r\n\r\n", 1)
        length = next(int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length"))
        while len(rest) < length:
            rest += s.recv(65536)
        answers.append((head.split(b"\r\n")[0].decode(), json.loads(rest)))
    alpn, version = s.selected_alpn_protocol(), s.version()
    s.close()
    return alpn, version, answers


def refused(identity):
    """True when a client with `identity` gets no HTTP answer."""
    try:
        s = context(["http/1.1"], identity).wrap_socket(
            socket.create_connection(("127.0.0.1", PORT), timeout=30), server_hostname="localhost")
        s.sendall(b"GET /v1/models HTTP/1.1\r\nhost: localhost\r\n\r\n")
        return not s.recv(65536).startswith(b"HTTP/")
    except (ssl.SSLError, ConnectionError, OSError):
        return True


def http_checks():
    alpn, version, answers = http1_exchange(context(["http/1.1"]), "/v1/models")
    check(alpn == "http/1.1", f"python ssl: ALPN {alpn}, {version}")
    check(all(a[0] == "HTTP/1.1 200 OK" and any(m["id"] == MODEL for m in a[1]["data"]) for a in answers),
          "python ssl: two requests on one connection list the model")
    alpn, _, answers = http1_exchange(context(["http/1.1"]), "/v1/completions",
                                      {"model": MODEL, "prompt": "Hello", "max_tokens": 5})
    check(answers[1][0] == "HTTP/1.1 200 OK" and answers[1][1]["usage"]["completion_tokens"] == 5,
          "python ssl: a completion over HTTPS")
    s = context(["h2", "http/1.1"]).wrap_socket(socket.create_connection(("127.0.0.1", PORT)), server_hostname="localhost")
    check(s.selected_alpn_protocol() == "h2", "ALPN h2 first: the server chooses h2")
    s.close()

    import openai

    # The SDK's own HTTP client, verifying the server against the CA (and presenting the
    # client certificate under mTLS).
    http = openai.DefaultHttpxClient(verify=context(["h2", "http/1.1"]))
    client = openai.OpenAI(base_url=f"https://localhost:{PORT}/v1", api_key="none", http_client=http)
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=6)
    check(r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 6, "openai SDK: a whole chat answer over HTTPS")
    pieces = list(client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                                 max_tokens=6, stream=True))
    check(pieces[-1].choices[0].finish_reason == "length", f"openai SDK: a streamed chat answer over HTTPS ({len(pieces)} chunks)")
    if MTLS:
        check(refused(None), "mTLS: a client without a certificate is refused")
        check(refused((os.path.join(CERTS, "stranger.pem"), os.path.join(CERTS, "stranger.key"))),
              "mTLS: a client with an untrusted certificate is refused")


def grpc_checks():
    import numpy as np
    import tritonclient.grpc as grpcclient

    tc = grpcclient.InferenceServerClient(
        url=f"localhost:{PORT}", ssl=True, root_certificates=CA,
        private_key=IDENTITY[1] if IDENTITY else None, certificate_chain=IDENTITY[0] if IDENTITY else None)
    check(tc.is_server_live(), "tritonclient over TLS: server live")
    check(tc.get_model_metadata(MODEL).name == MODEL, "tritonclient over TLS: model metadata")
    t = grpcclient.InferInput("text_input", [1], "BYTES")
    t.set_data_from_numpy(np.array([b"Hello"], dtype=np.object_))
    res = tc.infer(MODEL, [t], parameters={"max_tokens": 4})
    check(res.as_numpy("text_output") is not None, "tritonclient over TLS: a unary infer")


{"http": http_checks, "grpc": grpc_checks}[PART]()
