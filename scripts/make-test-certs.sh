#!/usr/bin/env bash
# Writes the throwaway certificates the request-plane and NATS TLS tests use into
# tests/data/tls/ (or the directory given as $1), with the openssl CLI. Every certificate is
# valid for 10000 days (about 27 years) from the day it is made; run again to renew.
#
#   ca.pem, ca.key               test CA "switchyard test CA"
#   server.pem, server.key       leaf signed by ca: SAN IP:127.0.0.1, DNS:localhost;
#                                serverAuth and clientAuth (a process's one identity)
#   client.pem, client.key       leaf signed by ca: CN switchyard-test-client, clientAuth
#   dnsonly.pem, dnsonly.key     leaf signed by ca: SAN DNS:localhost only (no IP)
#   other-ca.pem, other-ca.key   a second CA nobody trusts
#   other.pem, other.key         leaf signed by other-ca, same SANs as server.pem
#
# Keys are EC P-256 in PKCS#8. Needs only openssl (apt-get install openssl).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-tests/data/tls}
command -v openssl >/dev/null || { echo "make-test-certs.sh: no openssl: apt-get install openssl" >&2; exit 1; }
mkdir -p "$OUT"
DAYS=10000
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$OUT/$1.key" 2>/dev/null; }

ca() { # name subject
  key "$1"
  openssl req -x509 -new -key "$OUT/$1.key" -sha256 -days $DAYS -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$OUT/$1.pem"
}

leaf() { # name issuer cn san eku
  key "$1"
  openssl req -new -key "$OUT/$1.key" -subj "/CN=$3" -out "$TMP/$1.csr"
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature"
    echo "extendedKeyUsage=$5"
    [ -n "$4" ] && echo "subjectAltName=$4"
  } >"$TMP/$1.ext"
  openssl x509 -req -in "$TMP/$1.csr" -CA "$OUT/$2.pem" -CAkey "$OUT/$2.key" -CAcreateserial \
    -CAserial "$TMP/$2.srl" -days $DAYS -sha256 -extfile "$TMP/$1.ext" -out "$OUT/$1.pem" 2>/dev/null
}

ca ca "switchyard test CA"
ca other-ca "untrusted test CA"
leaf server ca 127.0.0.1 "IP:127.0.0.1,DNS:localhost" "serverAuth,clientAuth"
leaf client ca switchyard-test-client "" "clientAuth"
leaf dnsonly ca localhost "DNS:localhost" "serverAuth,clientAuth"
leaf other other-ca 127.0.0.1 "IP:127.0.0.1,DNS:localhost" "serverAuth,clientAuth"
echo "certificates in $OUT (valid $DAYS days):"
for c in ca server client dnsonly other-ca other; do
  printf '  %-12s %s\n' "$c.pem" "$(openssl x509 -in "$OUT/$c.pem" -noout -enddate)"
done
