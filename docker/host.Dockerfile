# The host daemon image: `nexbot` and `nexbot-ctl` (static in a release build), and the `iptables` (with its
# shared libraries) that the egress firewall runs. Built FROM scratch because no base image can
# be pulled (and none is needed). Build it with `make host-image`, which stages the tree under
# target/host-image/ (docker/stage-host-image.sh); the build context is the repository root, of
# which .dockerignore sends only the staged trees.
#
# No shell and no CA bundle: reqwest uses rustls with the webpki built-in roots.
# It runs as root on purpose: it talks to the Docker socket and installs iptables rules; the
# compose file drops every capability but NET_ADMIN and makes the root filesystem read-only.
# Secrets are never baked in: NEXBOT_LLM_API_KEY, NEXBOT_TELEGRAM_TOKEN and NEXBOT_MASTER_KEY
# come from the environment at run time.
FROM scratch
COPY target/host-image/rootfs/ /
ENV PATH=/bin:/sbin \
    HOME=/data \
    NEXBOT_CONFIG=/data/config.toml
WORKDIR /data
ENTRYPOINT ["/bin/nexbot"]
# `--init` writes the default workspace and config.toml into an empty data volume.
CMD ["serve", "--init"]
