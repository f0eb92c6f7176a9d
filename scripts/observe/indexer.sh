#!/usr/bin/env bash
# Observes 1.6.1's served KV indexer: two real `dynamo.mocker` workers (file discovery, TCP
# request plane, ZMQ KV events) behind two real `dynamo.frontend --router-mode kv`, A with
# `--serve-indexer` and B with `--use-remote-indexer`, and writes what it saw under $OUT
# (default /tmp/obs-indexer): every discovery record (the `kv_indexer_query` instance that A
# registers), the answers of chat requests with one long shared prefix sent through A and
# then through B (usage, cached tokens, both frontends' indexer metrics and routing log
# lines), which processes hold connections to the workers' KV-event publishers (ss), a
# loopback capture decoded into the `kv_indexer_query` exchange (request frame: path,
# headers, control message, body; call-back frames: raw bytes in hex and decoded), and what B
# answers once A is gone (B kept running, then B restarted alone).
#
# Needs root (unshare -n), tcpdump, the Dynamo venv (scripts/install-dynamo.sh) and the qwen3
# files (scripts/fetch-models.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/obs-indexer}
source scripts/real-dynamo-env.sh
if [ "${1:-}" != "--inside" ]; then
  need tcpdump ss
  rm -rf "$OUT"; mkdir -p "$OUT"
fi
# Only Dynamo's processes run here: no switchyard build needed.
SWITCHYARD_BIN=${SWITCHYARD_BIN:-unused} enter_loopback_namespace "$0" "$@"
export DYN_FILE_KV=$OUT/kv
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null' EXIT
S=$OUT/summary.txt
log() { echo "$*" | tee -a "$S"; }
A=18730
B=18731
# A long shared prefix: several full 64-token blocks (the mocker's default block size).
PREFIX=$(for i in $(seq 1 40); do printf 'Rule %d: the indexer keeps every block that a worker stores. ' "$i"; done)
HALF=$(for i in $(seq 1 20); do printf 'Rule %d: the indexer keeps every block that a worker stores. ' "$i"; done)
OTHER=$(for i in $(seq 1 12); do printf 'Clause %d: nothing here was ever stored before. ' "$i"; done)
# `chat PORT LABEL QUESTION MAX_TOKENS STREAM [SYSTEM [WORKER]]`: the answer goes to
# $OUT/chat-LABEL.txt; logs the HTTP status, the usage and (streamed) the number of data lines.
# SYSTEM defaults to $PREFIX ("" for none); WORKER pins the request (nvext.backend_instance_id).
chat() {
  local sys=${6-$PREFIX} msgs=""
  [ -n "$sys" ] && msgs="{\"role\":\"system\",\"content\":\"$sys\"},"
  local body="{\"model\":\"qwen3\",\"messages\":[$msgs{\"role\":\"user\",\"content\":\"$3\"}],\"max_tokens\":$4,\"stream\":$5"
  [ "$5" = true ] && body="$body,\"stream_options\":{\"include_usage\":true}"
  [ -n "${7:-}" ] && body="$body,\"nvext\":{\"backend_instance_id\":$7}"
  body="$body}"
  local code
  code=$(curl -s -m 30 -N "127.0.0.1:$1/v1/chat/completions" -H 'content-type: application/json' \
    -d "$body" -o "$OUT/chat-$2.txt" -w '%{http_code}')
  log "$2 (port $1, stream=$5): HTTP $code usage $(grep -o '"usage":{[^}]*\(}[^}]*\)\?}' "$OUT/chat-$2.txt" | tail -n 1)" \
    "data-lines $(grep -c '^data:' "$OUT/chat-$2.txt")"
  [ "$code" = 200 ] || log "  body: $(head -c 1500 "$OUT/chat-$2.txt" | tr '\n' ' ')"
}
clean() { sed 's/\x1b\[[0-9;]*m//g' "$1"; }
dump_records() { # FILE
  find "$DYN_FILE_KV" -type f | sort | while read -r f; do echo "$f: $(cat "$f")"; done >"$1"
}

tcpdump -i lo -s 0 -w "$OUT/lo.pcap" >/dev/null 2>&1 & PIDS+=($!); TCPDUMP=$!
sleep 0.5
MOCKERS=""
for w in 1 2; do
  "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --speedup-ratio 10 \
    --discovery-backend file --request-plane tcp --event-plane zmq >"$OUT/mocker$w.log" 2>&1 & PIDS+=($!)
  MOCKERS="$MOCKERS $!"
done
# The frontends also log their KV router's decisions at debug level.
export DYN_LOG=${DYN_LOG:-info,dynamo_kv_router=debug,dynamo_llm::kv_router=debug}
workers_registered 2 mockers || fail "mockers did not register" "$OUT/mocker1.log" "$OUT/mocker2.log"
"$PY" -m dynamo.frontend --http-host 127.0.0.1 --http-port $A --discovery-backend file \
  --router-mode kv --serve-indexer >"$OUT/frontend-a.log" 2>&1 & PIDS+=($!); FE_A=$!
model_listed $A qwen3 || fail "A lists no model" "$OUT/frontend-a.log"
for _ in $(seq 1 100); do find "$DYN_FILE_KV" -path '*kv_indexer_query*' -type f | grep -q . && break; sleep 0.2; done
"$PY" -m dynamo.frontend --http-host 127.0.0.1 --http-port $B --discovery-backend file \
  --router-mode kv --use-remote-indexer >"$OUT/frontend-b.log" 2>&1 & PIDS+=($!); FE_B=$!
model_listed $B qwen3 || fail "B lists no model" "$OUT/frontend-b.log"
sleep 2
dump_records "$OUT/records.txt"
log "records: $(wc -l <"$OUT/records.txt") in $OUT/records.txt; served indexer:"
grep kv_indexer_query "$OUT/records.txt" | tee -a "$S"
ss -tnpa >"$OUT/ss.txt" 2>&1
W1=$(grep -o 'instances/dynamo%2Fbackend%2Fgenerate[^ ]* .*"instance_id":[0-9]*' "$OUT/records.txt" | grep -o '[0-9]*$' | sed -n 1p)
W2=$(grep -o 'instances/dynamo%2Fbackend%2Fgenerate[^ ]* .*"instance_id":[0-9]*' "$OUT/records.txt" | grep -o '[0-9]*$' | sed -n 2p)
log "workers $W1 $W2"
log "mocker pids$MOCKERS, A pid $FE_A, B pid $FE_B; KV-event publishers (records) and who is connected to them (ss):"
for p in $(grep -o 'kv%2Devents[^:]*: .*"endpoint":"tcp://127.0.0.1:[0-9]*' "$OUT/records.txt" | grep -o '[0-9]*$'); do
  log "  publisher :$p -> ESTAB sockets of pids: $(grep ":$p " "$OUT/ss.txt" | grep ESTAB | grep -o 'pid=[0-9]*' | sort | uniq -c | tr '\n' ' ')"
done

log "== through B before A has seen anything (empty index), and a prompt shorter than a block"
chat $B b0 "Question zero?" 4 false "$OTHER"
chat $B b-short "Hi" 2 false ""
sleep 1
log "== through A (serving; pinned to each worker in turn), then through B (remote)"
chat $A a1 "Question one?" 4 false "$PREFIX" "$W1"
chat $A a2 "Question two?" 4 true "$PREFIX" "$W2"
chat $A a3 "Question three?" 4 false
sleep 2
chat $B b1 "Question one?" 4 false
chat $B b2 "Question two?" 4 true
chat $B b3 "Question three?" 4 false
chat $B b-part "Question four?" 4 false "$HALF$OTHER"
sleep 1
curl -s 127.0.0.1:$A/metrics >"$OUT/metrics-a.txt"
curl -s 127.0.0.1:$B/metrics >"$OUT/metrics-b.txt"
for f in a b; do
  log "metrics-$f names (indexer|remote): $(grep -v '^#' "$OUT/metrics-$f.txt" | grep -iE 'indexer|remote' | sed 's/[{ ].*//' | sort -u | tr '\n' ' ')"
  grep -v '^#' "$OUT/metrics-$f.txt" | grep -iE 'indexer|remote' | grep -v '_bucket' | sed 's/^/  /' | tee -a "$S"
done
for f in a b; do
  log "routing decisions $f: $(clean "$OUT/frontend-$f.log" | grep 'route request completed' | grep -o 'overlap_blocks=[0-9]* phase=[A-Za-z]* worker_id=[0-9]*' | tr '\n' ';')"
done

log "== A gone, B still running"
kill $FE_A; wait $FE_A 2>/dev/null
sleep 3
dump_records "$OUT/records-after-a.txt"
log "indexer records left: $(grep -c kv_indexer_query "$OUT/records-after-a.txt")"
chat $B b-noa "Question one?" 4 false
chat $B b-noa-s "Question one?" 4 true
log "== B restarted alone"
kill $FE_B; wait $FE_B 2>/dev/null
sleep 1
"$PY" -m dynamo.frontend --http-host 127.0.0.1 --http-port $B --discovery-backend file \
  --router-mode kv --use-remote-indexer >"$OUT/frontend-b2.log" 2>&1 & PIDS+=($!); FE_B2=$!
model_listed $B qwen3 || log "B2 lists no model"
sleep 1
chat $B b2-alone "Question one?" 4 false
chat $B b2-alone-s "Question one?" 4 true
log "== A restarted (A2) while B2 runs, then A2 killed with SIGKILL (its record stays behind)"
"$PY" -m dynamo.frontend --http-host 127.0.0.1 --http-port $A --discovery-backend file \
  --router-mode kv --serve-indexer >"$OUT/frontend-a2.log" 2>&1 & PIDS+=($!); FE_A2=$!
model_listed $A qwen3 || log "A2 lists no model"
sleep 2
chat $B b2-late "Question one?" 4 false
kill -9 $FE_A2; wait $FE_A2 2>/dev/null
sleep 2
dump_records "$OUT/records-after-a2-kill.txt"
log "indexer records left after SIGKILL: $(grep -c kv_indexer_query "$OUT/records-after-a2-kill.txt")"
chat $B b2-stale "Question one?" 4 false
chat $B b2-stale-s "Question one?" 4 true
kill $FE_B2; wait $FE_B2 2>/dev/null
kill $TCPDUMP; wait $TCPDUMP 2>/dev/null

for f in frontend-a frontend-b frontend-b2 frontend-a2; do
  clean "$OUT/$f.log" | grep -iE 'remote|indexer|Skipping KV event|WARN|ERROR' | cut -c1-600 >"$OUT/$f.grep.txt"
  log "$f log (remote|indexer|Skipping KV event|WARN|ERROR), $(wc -l <"$OUT/$f.grep.txt") lines in $OUT/$f.grep.txt:"
  head -n 25 "$OUT/$f.grep.txt" | tee -a "$S"
done

# A's request-plane listen port, from its kv_indexer_query instance record; every frame to it.
IPORT=$(cat "$OUT"/records*.txt | grep kv_indexer_query | grep -o '"tcp":"127.0.0.1:[0-9]*' | cut -d: -f3 | sort -u | tr '\n' ' ')
log "indexer port(s): $IPORT"
"$PY" scripts/observe/plane_frames.py "$OUT/lo.pcap" $IPORT >"$OUT/frames-indexer.txt" 2>&1
# The same exchange byte for byte: request frames to those ports and the call-back streams
# that answer them (matched by the subject in the control message), each part in hex.
"$PY" - "$OUT/lo.pcap" $IPORT >"$OUT/indexer-raw.txt" 2>&1 <<'PYEOF'
import json, struct, sys
sys.path.insert(0, "scripts/observe")
from pcap_conns import packets
import msgspec

def dec(b):
    if not b:
        return None
    try:
        return json.loads(b)
    except ValueError:
        pass
    try:
        return {"<msgpack>": msgspec.msgpack.decode(b)}
    except Exception:
        return {"<undecoded>": b.hex()}

def two_part(b, off):
    if len(b) - off < 24:
        return None
    hl, bl, ck = struct.unpack(">QQQ", b[off:off + 24])
    if len(b) - off < 24 + hl + bl:
        return None
    return b[off:off + 24], b[off + 24:off + 24 + hl], b[off + 24 + hl:off + 24 + hl + bl], off + 24 + hl + bl

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
subjects = {}
for key in order:
    c, s = conns[key]
    if key[1] not in ports:
        continue
    print(f"CONNECTION :{key[0]} -> :{key[1]} client sent {len(c)} bytes, server sent {len(s)} bytes; server bytes hex: {s[:200].hex()}")
    off = 0
    while off + 2 <= len(c):
        start = off
        n = struct.unpack(">H", c[off:off + 2])[0]
        p = c[off + 2:off + 2 + n]
        off += 2 + n
        hn = struct.unpack(">H", c[off:off + 2])[0]
        headers = c[off + 2:off + 2 + hn]
        off += 2 + hn
        pn = struct.unpack(">I", c[off:off + 4])[0]
        frame = c[off + 4:off + 4 + pn]
        off += 4 + pn
        print(f"REQUEST frame ({off - start} bytes) path={p.decode(errors='replace')}")
        print(f"  whole frame hex: {c[start:off].hex()}")
        print(f"  headers: {headers.decode(errors='replace')}")
        parts = two_part(frame, 0)
        if not parts:
            print(f"  payload (not two-part) hex: {frame.hex()}")
            continue
        pre, ctl, body, _ = parts
        print(f"  two-part prefix (header_len, body_len, checksum) hex: {pre.hex()}")
        print(f"  control ({len(ctl)} bytes): {ctl.decode(errors='replace')}")
        print(f"  body ({len(body)} bytes) hex: {body.hex()}")
        print(f"  body text: {body.decode(errors='replace')}")
        print(f"  body decoded: {json.dumps(dec(body))}")
        try:
            info = json.loads(json.loads(ctl)["connection_info"]["info"])
            subjects[info["subject"]] = info
        except Exception as e:
            print(f"  (no subject: {e})")
    print(f"  frames end at {off} of {len(c)} bytes")
print(f"\n{len(subjects)} request subjects")
for key in order:
    c, s = conns[key]
    if not c.startswith(b"\0\0\0\0\0\0\0"):
        continue
    parts = two_part(c, 0)
    if not parts or not any(sub.encode() in parts[1] + parts[2] for sub in subjects):
        continue
    print(f"CALLBACK :{key[0]} -> :{key[1]} (client sent {len(c)} bytes, server sent {len(s)} bytes: {s.hex()})")
    print(f"  whole stream hex: {c.hex()}")
    off = 0
    while True:
        parts = two_part(c, off)
        if not parts:
            break
        pre, h, d, off = parts
        print(f"  frame prefix {pre.hex()}")
        if h:
            print(f"    header ({len(h)} bytes) hex: {h.hex()}")
            print(f"    header text: {h.decode(errors='replace')}  decoded: {json.dumps(dec(h))}")
        if d:
            print(f"    data ({len(d)} bytes) hex: {d.hex()}")
            print(f"    data text: {d.decode(errors='replace')}  decoded: {json.dumps(dec(d))}")
    print(f"  frames end at {off} of {len(c)} bytes")
PYEOF
log "indexer frames: $(grep -c '^REQUEST' "$OUT/frames-indexer.txt") requests, $(grep -c '^CALLBACK' "$OUT/frames-indexer.txt") call-backs in $OUT/frames-indexer.txt; raw bytes in $OUT/indexer-raw.txt"
head -n 30 "$OUT/indexer-raw.txt" | cut -c1-1500 | tee -a "$S"
# The workers' own request-plane frames: generate, and the recovery dumps (worker_kv_query_source)
# that a serving frontend asks for when it starts (a remote-indexer frontend asks for none).
WPORTS=$(grep -o '"tcp":"127.0.0.1:[0-9]*/[0-9a-f]*/dynamo/backend/generate' "$OUT/records.txt" | cut -d: -f3 | cut -d/ -f1 | tr '\n' ' ')
"$PY" scripts/observe/plane_frames.py "$OUT/lo.pcap" $WPORTS >"$OUT/frames-workers.txt" 2>&1
log "worker frames: $(grep -c '^REQUEST.*generate' "$OUT/frames-workers.txt") generate, $(grep -c '^REQUEST.*worker_kv_query_source' "$OUT/frames-workers.txt") worker_kv_query_source requests in $OUT/frames-workers.txt"
# KV-event publisher connections in the capture (who dialed the workers' ZMQ publishers).
PUBS=$(grep -o '"topic":"kv-events".*"endpoint":"tcp://127.0.0.1:[0-9]*' "$OUT/records.txt" | grep -o '[0-9]*$' | tr '\n' ' ')
"$PY" scripts/observe/pcap_conns.py "$OUT/lo.pcap" $PUBS >"$OUT/kv-event-conns.txt" 2>&1
log "connections to the KV-event publishers ($PUBS) in the capture: $(grep -c . "$OUT/kv-event-conns.txt") lines in $OUT/kv-event-conns.txt"
echo "written to $OUT"
