#!/usr/bin/env bash
# Refreshes assets/swagger-ui/: the files of the npm package swagger-ui-dist that `/docs`
# serves (src/service/swagger.rs embeds them with include_bytes!). Dynamo 1.6.1 serves the
# dist folder of Swagger UI 5.17.14, byte for byte the package's files of that version
# (docs/dynamo/swagger-ui.md); to move to another version, change VERSION and TARBALL_SHA256
# below, run this, then update the table in src/service/swagger.rs if the file list changed.
#
# What it writes:
#   * the files the UI page loads, as they are (index.html, index.css, swagger-ui.css,
#     swagger-ui-bundle.js, swagger-ui-standalone-preset.js, the two favicons,
#     oauth2-redirect.html), with the package's LICENSE and NOTICE;
#   * the other builds and the source maps gzipped (`NAME.gz`, `gzip -9 -n`: no name or time
#     in the header, so the same input gives the same bytes): 1.6.1 serves them too, but
#     only a debugger or a bundler asks for them, so the binary carries them at a quarter
#     of their size and inflates one when it is first asked for;
#   * SHA256SUMS: the sha256 of every served file as the package has it (uncompressed).
# swagger-initializer.js is switchyard's own (the package's initializer points at a demo
# URL) and is left alone.
#
# Usage: bash scripts/vendor-swagger-ui.sh     (needs npm, tar, gzip, sha256sum)
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=5.17.14
TARBALL_SHA256=c57badf459aa6e65cc036b3862d0502a63f9a22546407ffcb0e64f85f816bb28
DEST=assets/swagger-ui
RAW=(index.html index.css swagger-ui.css swagger-ui-bundle.js swagger-ui-standalone-preset.js
    favicon-16x16.png favicon-32x32.png oauth2-redirect.html)
GZIPPED=(swagger-ui.js swagger-ui-es-bundle.js swagger-ui-es-bundle-core.js
    swagger-ui.css.map swagger-ui.js.map swagger-ui-bundle.js.map swagger-ui-es-bundle.js.map
    swagger-ui-es-bundle-core.js.map swagger-ui-standalone-preset.js.map)

for tool in npm tar gzip sha256sum; do
    command -v "$tool" >/dev/null || { echo "vendor-swagger-ui: '$tool' is required" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "swagger-ui-dist@$VERSION" >/dev/null)
tarball="$work/swagger-ui-dist-$VERSION.tgz"
echo "$TARBALL_SHA256  $tarball" | sha256sum -c --quiet - ||
    { echo "vendor-swagger-ui: the tarball's sha256 is not $TARBALL_SHA256" >&2; exit 1; }
tar -xzf "$tarball" -C "$work"
pkg=$work/package

mkdir -p "$DEST"
find "$DEST" -type f ! -name swagger-initializer.js ! -name README.md -delete
cp "$pkg/LICENSE" "$pkg/NOTICE" "$DEST/"
for f in "${RAW[@]}"; do
    cp "$pkg/$f" "$DEST/$f"
done
for f in "${GZIPPED[@]}"; do
    gzip -9 -n -c "$pkg/$f" >"$DEST/$f.gz"
done
(cd "$pkg" && sha256sum "${RAW[@]}" "${GZIPPED[@]}") >"$DEST/SHA256SUMS"
echo "assets/swagger-ui: swagger-ui-dist $VERSION, $(du -sb "$DEST" | cut -f1) bytes"
